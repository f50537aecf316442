package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// RunRequest is the body of POST /v1/run: a short command the agent runs
// to its end on behalf of a job and answers with its output (a checkpoint
// conversion, a checkpoint marker read, writing a launch's files into the
// job's directories). Unlike a supervised process it leaves no record and
// does not outlive the request: when the caller goes away, or Timeout
// passes, its process group is killed.
type RunRequest struct {
	Argv []string `json:"argv"`
	// Env is added to (and overrides) the agent's own environment. It
	// reaches the command as its environment, never on a command line.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory (absolute, must exist); empty means /.
	Dir string `json:"dir,omitempty"`
	// RunAs is the Unix user the command runs as, as for ProcessSpec.RunAs
	// (setpriv with the user's uid, gid and groups); empty: the agent's
	// own user.
	RunAs string `json:"run_as,omitempty"`
	// Stdin is fed to the command's standard input (JSON: base64).
	Stdin []byte `json:"stdin,omitempty"`
	// TimeoutSeconds bounds the run (0: until the caller goes away).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// RunResult is the answer of POST /v1/run.
type RunResult struct {
	// ExitCode is the command's exit status, 128+N when a signal N ended
	// it (shell convention).
	ExitCode int `json:"exit_code"`
	// Stdout holds the first MaxRunOutput bytes of standard output
	// (JSON: base64); StdoutTruncated says that there was more.
	Stdout          []byte `json:"stdout"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	// Stderr holds the first MaxRunStderr bytes of standard error.
	Stderr string `json:"stderr,omitempty"`
	// TimedOut says the run was killed after TimeoutSeconds.
	TimedOut bool `json:"timed_out,omitempty"`
}

// Bounds of what a run answers.
const (
	MaxRunOutput = 256 << 10
	MaxRunStderr = 16 << 10
)

// RunCommand runs req to its end (see RunRequest) and reports its exit status and
// output. A command that cannot start is a *FieldError naming the field.
func RunCommand(ctx context.Context, req RunRequest) (RunResult, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return RunResult{}, &FieldError{"argv", "must name a command"}
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return RunResult{}, &FieldError{"env", fmt.Sprintf("bad variable name %q", k)}
		}
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > 7*24*3600 || req.TimeoutSeconds != req.TimeoutSeconds {
		return RunResult{}, &FieldError{"timeout_seconds", "must be between 0 and 604800"}
	}
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}
	if !filepath.IsAbs(dir) {
		return RunResult{}, &FieldError{"dir", fmt.Sprintf("%q is not absolute", dir)}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return RunResult{}, &FieldError{"dir", fmt.Sprintf("%q is not a directory", dir)}
	}
	extra := map[string]string{}
	var prefix []string
	if req.RunAs != "" {
		p, err := runAsArgv(req.RunAs)
		if err != nil {
			return RunResult{}, &FieldError{"run_as", err.Error()}
		}
		prefix = p
		if len(prefix) > 0 {
			u, _ := user.Lookup(req.RunAs)
			extra["HOME"], extra["USER"], extra["LOGNAME"] = u.HomeDir, u.Username, u.Username
		}
	}
	for k, v := range req.Env {
		extra[k] = v
	}
	path := os.Getenv("PATH")
	if v, ok := extra["PATH"]; ok {
		path = v
	}
	// The command is found on its own PATH (the job's), not the agent's.
	exe, ok := lookExecutable(req.Argv[0], path, dir)
	if !ok {
		return RunResult{}, &FieldError{"argv", fmt.Sprintf("executable %q not found", req.Argv[0])}
	}
	if req.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds*float64(time.Second)))
		defer cancel()
	}
	argv := append(append(prefix, exe), req.Argv[1:]...)
	if len(prefix) == 0 {
		argv[0] = req.Argv[0]
	}
	cmd := &exec.Cmd{Path: exe, Args: argv, Dir: dir}
	if len(prefix) > 0 {
		cmd.Path = prefix[0]
	}
	cmd.Env = mergeRunEnv(os.Environ(), extra)
	cmd.Stdin = bytes.NewReader(req.Stdin)
	var stdout, stderr capped
	stdout.max, stderr.max = MaxRunOutput, MaxRunStderr
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Own session, so that an end of the run kills whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return RunResult{}, fmt.Errorf("run %s: %w", req.Argv[0], err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	_ = syscall.Kill(-pid, syscall.SIGKILL) // what the command left behind
	res := RunResult{Stdout: stdout.b.Bytes(), StdoutTruncated: stdout.over, Stderr: stderr.b.String()}
	if res.Stdout == nil {
		res.Stdout = []byte{}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		res.ExitCode = ee.ExitCode()
		if ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	default:
		return RunResult{}, fmt.Errorf("run %s: %w", req.Argv[0], err)
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && req.TimeoutSeconds > 0 {
			res.TimedOut = true
			return res, nil
		}
		return res, ctx.Err()
	}
	return res, nil
}

// mergeRunEnv is base with extra's variables added or replaced.
func mergeRunEnv(base []string, extra map[string]string) []string {
	env := mergeEnv(base, extra, "")
	return env[:len(env)-1] // mergeEnv's REPLAN_PROCESS_ID: a run is no supervised process
}

// capped keeps the first max bytes written to it and notes what it drops.
type capped struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.b.Len(); n > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.b.Write(p)
	return n, nil
}

func (a *Agent) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	if err := decodeJSON(r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	a.log.Debug("run", "argv", req.Argv, "run_as", req.RunAs, "dir", req.Dir)
	res, err := RunCommand(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// Run runs a command on the agent's server to its end (POST /v1/run) and
// returns its exit status and output; a non-zero exit is no error. When
// ctx ends first, the agent kills the command.
func (c *Client) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	var res RunResult
	err := c.do(ctx, http.MethodPost, "/v1/run", req, &res)
	return res, err
}
