package fleet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/ssh"
)

// Deploy outcomes, one per server (DeployResult.Status).
const (
	StatusDeployed  = "deployed"   // no agent was running; it is now
	StatusUpgraded  = "upgraded"   // an agent with another binary was replaced
	StatusRestarted = "restarted"  // same binary, but it did not answer or ran with other flags
	StatusUpToDate  = "up to date" // the same binary answers with the same flags: nothing done
	StatusFailed    = "failed"     // see Error
)

// Launchers that start the agent detached.
const (
	LauncherSetsid     = "setsid"
	LauncherSystemdRun = "systemd-run"
)

// DeployOptions say what to deploy and how long to wait.
type DeployOptions struct {
	// AgentBinary is the local file uploaded as DIR/bin/replan-agent:
	// either cmd/replan-agent or the whole replan binary (which has
	// `replan agent serve`); the server side tells them apart.
	AgentBinary string
	// FakeGPUs is passed to the agent as --fake-gpus when not empty.
	FakeGPUs string
	// ReadyTimeout bounds the wait for a started agent to answer Status;
	// default 30s.
	ReadyTimeout time.Duration
	// StopTimeout is how long an old agent has to exit after SIGTERM
	// before it gets SIGKILL; default 10s.
	StopTimeout time.Duration
	// KeepFlags restarts an agent that runs (but is to be replaced or
	// does not answer) with the flags it runs with, not FakeGPUs': the
	// daemon's redeploy of a server whose agent stopped answering
	// (control/redeploy.go) must not change how it was deployed.
	KeepFlags bool
	// Progress, when set, sees every finished server.
	Progress ssh.Progress
}

// DeployResult is the outcome on one server. Its JSON form is the stable
// schema of `replan deploy --json` (docs/agent.md).
type DeployResult struct {
	Server string `json:"server"`
	Addr   string `json:"addr"`
	// Status is one of the Status* constants.
	Status string `json:"status"`
	// Error says why, when Status is "failed".
	Error string `json:"error,omitempty"`
	// RemoteDir is the agent directory on the server.
	RemoteDir string `json:"remote_dir,omitempty"`
	// SHA256 is the deployed binary's sha256.
	SHA256 string `json:"sha256"`
	// PreviousSHA256 is the sha256 of the agent that ran before, if any.
	PreviousSHA256 string `json:"previous_sha256,omitempty"`
	// AgentVersion is what the running agent reports.
	AgentVersion string `json:"agent_version,omitempty"`
	PID          int    `json:"pid,omitempty"`
	// Launcher is how the agent was started ("setsid" or "systemd-run");
	// empty when nothing was started.
	Launcher string `json:"launcher,omitempty"`
	// GPUs is the agent's GPU count once it answered.
	GPUs      int     `json:"gpus"`
	DurationS float64 `json:"duration_s"`
	// Err is Error as an error value.
	Err error `json:"-"`
}

// fileSHA256 is the hex sha256 of a local file.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Deploy installs and starts the agent on every server, at most
// Options.Concurrency at once, and returns one result per server in input
// order. It fails as a whole only when the local binary cannot be read;
// a server's failure is in its result.
func (f *Fleet) Deploy(ctx context.Context, servers []cluster.Server, opts DeployOptions) ([]DeployResult, error) {
	if opts.AgentBinary == "" {
		return nil, errors.New("deploy: no agent binary given")
	}
	st, err := os.Stat(opts.AgentBinary)
	if err != nil {
		return nil, fmt.Errorf("deploy: agent binary: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("deploy: agent binary %s is not a regular file", opts.AgentBinary)
	}
	sum, err := fileSHA256(opts.AgentBinary)
	if err != nil {
		return nil, fmt.Errorf("deploy: agent binary: %w", err)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	hosts := make([]ssh.Host, len(servers))
	byName := map[string]cluster.Server{}
	for i, s := range servers {
		hosts[i] = ssh.HostFromServer(s)
		byName[hosts[i].Name] = s
	}
	results := make([]DeployResult, len(servers))
	index := map[string]int{}
	for i, h := range hosts {
		index[h.Name] = i
	}
	ssh.ForEach(ctx, hosts, f.limit, opts.Progress, func(ctx context.Context, h ssh.Host) error {
		s := byName[h.Name]
		r := f.deployOne(ctx, s, sum, opts)
		results[index[h.Name]] = r
		if r.Err != nil {
			return r.Err
		}
		return nil
	})
	for i := range results {
		if results[i].Server == "" { // cancelled before it started
			results[i] = DeployResult{Server: servers[i].Name, Addr: servers[i].Addr(), SHA256: sum, Status: StatusFailed,
				Err: ctx.Err(), Error: fmt.Sprint(ctx.Err())}
		}
	}
	return results, nil
}

func (f *Fleet) deployOne(ctx context.Context, s cluster.Server, sum string, opts DeployOptions) (r DeployResult) {
	start := time.Now()
	r = DeployResult{Server: s.Name, Addr: s.Addr(), SHA256: sum}
	log := f.log.With(logServer, s.Name)
	defer func() {
		r.DurationS = time.Since(start).Seconds()
		if r.Err != nil {
			r.Status = StatusFailed
			r.Err = fmt.Errorf("deploy agent to %s: %w", s.Name, r.Err)
			r.Error = r.Err.Error()
			log.Warn("deploy failed", "err", r.Err)
		} else {
			log.Info("deploy", "status", r.Status, logPID, r.PID)
		}
	}()
	h := ssh.HostFromServer(s)
	if _, err := f.pool.Client(ctx, h); err != nil {
		r.Err = err
		return r
	}
	l, err := f.Layout(ctx, s)
	if err != nil {
		r.Err = err
		return r
	}
	r.RemoteDir = l.Dir
	want := agentFlags(l, opts.FakeGPUs)
	before, err := f.probe(ctx, h, l)
	if err != nil {
		r.Err = err
		return r
	}
	r.PreviousSHA256 = before.RunningSHA
	if i := slices.Index(before.Args, "--socket"); opts.KeepFlags && before.PID != 0 && i >= 0 {
		want = before.Args[i:]
	}
	if before.PID != 0 && before.RunningSHA == sum && sameFlags(before.Args, want) {
		st, err := f.status(ctx, s, l, 5*time.Second)
		if err == nil {
			r.Status, r.AgentVersion, r.GPUs, r.PID = StatusUpToDate, st.Version, st.GPUCount, before.PID
			if !before.PIDFileOK { // found through its socket: record its PID again
				_, err = f.script(ctx, h, `echo "$2" > "$1"`, l.PIDFile, strconv.Itoa(before.PID))
				r.Err = err
			}
			return r
		}
		log.Warn("agent runs the same binary but does not answer; restarting it", "err", err)
	}
	if before.InstalledSHA != sum {
		if _, err := f.pool.Output(ctx, h, "mkdir", "-p", "-m", "0700", l.Dir, path.Dir(l.Bin)); err != nil {
			r.Err = fmt.Errorf("create %s: %w", l.Dir, err)
			return r
		}
		if err := f.pool.Upload(ctx, h, opts.AgentBinary, l.Bin, 0o755); err != nil {
			r.Err = err
			return r
		}
	}
	if before.PID != 0 {
		if err := f.stop(ctx, h, before.PID, opts.StopTimeout); err != nil {
			r.Err = err
			return r
		}
	}
	r.Launcher, err = f.start(ctx, h, l, want)
	if err != nil {
		r.Err = err
		return r
	}
	st, err := f.waitReady(ctx, s, l, opts.ReadyTimeout)
	if err != nil {
		r.Err = err
		return r
	}
	after, err := f.probe(ctx, h, l)
	if err != nil {
		r.Err = err
		return r
	}
	if after.PID == 0 || after.RunningSHA != sum {
		r.Err = fmt.Errorf("an agent answers on %s but it is not the one just started (pid %d, binary sha256 %s)",
			l.Socket, after.PID, after.RunningSHA)
		return r
	}
	r.PID, r.AgentVersion, r.GPUs = after.PID, st.Version, st.GPUCount
	switch {
	case before.PID == 0:
		r.Status = StatusDeployed
	case before.RunningSHA != sum:
		r.Status = StatusUpgraded
	default:
		r.Status = StatusRestarted
	}
	return r
}

// agentFlags are the flags an agent at layout l runs with (after its
// subcommand).
func agentFlags(l Layout, fakeGPUs string) []string {
	f := []string{"--socket", l.Socket, "--state-dir", l.State}
	if fakeGPUs != "" {
		f = append(f, "--fake-gpus", fakeGPUs)
	}
	return f
}

// sameFlags compares a running agent's argv (from /proc) with the wanted
// flags: everything from --socket on must be equal.
func sameFlags(argv, want []string) bool {
	i := slices.Index(argv, "--socket")
	return i >= 0 && slices.Equal(argv[i:], want)
}

// agentProc is what probe found on a server.
type agentProc struct {
	PID          int      // 0: no agent runs for this layout
	RunningSHA   string   // sha256 of the running agent's executable
	Args         []string // its argv
	InstalledSHA string   // sha256 of DIR/bin/replan-agent, "" when absent
	PIDFileOK    bool     // DIR/agent.pid names the running agent
}

// probeScript finds the agent serving DIR/agent.sock: by the PID it
// recorded, else by scanning /proc for a process whose argv holds the
// socket path; it reports the sha256 of the running executable
// (/proc/PID/exe, still readable after the file was replaced) and of the
// installed binary.
const probeScript = `d=$1
sock="$d/agent.sock"
alive() { [ -r "/proc/$1/cmdline" ] && grep -qzxF -- "$sock" "/proc/$1/cmdline" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; }
pid=
p=$(cat "$d/agent.pid" 2>/dev/null)
case $p in ''|*[!0-9]*) ;; *) alive "$p" && pid=$p && echo "pidfile=ok" ;; esac
if [ -z "$pid" ]; then
	for c in $(grep -lzxF -- "$sock" /proc/[0-9]*/cmdline 2>/dev/null); do
		p=${c#/proc/}; p=${p%/cmdline}
		[ "$p" = "$$" ] && continue
		if alive "$p"; then pid=$p; break; fi
	done
fi
if [ -n "$pid" ]; then
	echo "pid=$pid"
	s=$(sha256sum < "/proc/$pid/exe" 2>/dev/null) && echo "running_sha=${s%% *}"
	tr '\0' '\n' < "/proc/$pid/cmdline" | sed 's/^/arg=/'
fi
if [ -f "$d/bin/replan-agent" ]; then s=$(sha256sum < "$d/bin/replan-agent") && echo "installed_sha=${s%% *}"; fi
exit 0`

func (f *Fleet) probe(ctx context.Context, h ssh.Host, l Layout) (agentProc, error) {
	out, err := f.script(ctx, h, probeScript, l.Dir)
	if err != nil {
		return agentProc{}, fmt.Errorf("look for a running agent: %w", err)
	}
	var p agentProc
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "pid":
			p.PID, _ = strconv.Atoi(v)
		case "running_sha":
			p.RunningSHA = v
		case "arg":
			p.Args = append(p.Args, v)
		case "installed_sha":
			p.InstalledSHA = v
		case "pidfile":
			p.PIDFileOK = v == "ok"
		}
	}
	return p, nil
}

// stopScript sends SIGTERM to the agent and waits for it to exit, then
// SIGKILL. Supervised processes run in their own sessions and survive; the
// next agent re-adopts them.
const stopScript = `pid=$1; n=$2
gone() { [ ! -r "/proc/$pid/stat" ] || [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" = Z ]; }
kill -TERM "$pid" 2>/dev/null
i=0
while ! gone && [ "$i" -lt "$n" ]; do sleep 0.1; i=$((i+1)); done
if ! gone; then
	kill -KILL "$pid" 2>/dev/null
	i=0
	while ! gone && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
	gone || { echo "agent pid $pid does not exit" >&2; exit 1; }
	echo killed
fi
exit 0`

func (f *Fleet) stop(ctx context.Context, h ssh.Host, pid int, grace time.Duration) error {
	tenths := max(int(grace/(100*time.Millisecond)), 1)
	out, err := f.script(ctx, h, stopScript, strconv.Itoa(pid), strconv.Itoa(tenths))
	if err != nil {
		return fmt.Errorf("stop old agent (pid %d): %w", pid, err)
	}
	if strings.Contains(string(out), "killed") {
		f.log.Warn("old agent ignored SIGTERM and was killed", logServer, h.Name, logPID, pid)
	}
	return nil
}

// startScript starts the agent detached from the SSH session: its own
// session (setsid), stdin from /dev/null, output appended to agent.log,
// SIGHUP ignored by the agent itself. The binary may be cmd/replan-agent
// (`serve`) or the whole replan (`agent serve`); `agent serve --help`
// tells them apart on the server. systemd-run --user is used only when a
// user manager answers and the user lingers (otherwise the manager, and
// the agent with it, would stop at logout), with KillMode=process so that
// stopping the agent never stops its supervised processes.
const startScript = `d=$1; shift
b="$d/bin/replan-agent"
mkdir -p "$d/agent" && chmod 0700 "$d" || exit 1
[ -x "$b" ] || { echo "$b is missing or not executable" >&2; exit 1; }
if "$b" agent serve --help >/dev/null 2>&1; then set -- "$b" agent serve "$@"; else set -- "$b" serve "$@"; fi
rm -f "$d/agent.pid"
run='d=$1; shift; echo $$ > "$d/agent.pid"; exec "$@" < /dev/null >> "$d/agent.log" 2>&1'
if command -v systemd-run >/dev/null 2>&1 && command -v loginctl >/dev/null 2>&1 &&
	systemctl --user show-environment >/dev/null 2>&1 &&
	[ "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes ]; then
	unit="replan-agent-$(printf '%s' "$d" | sha256sum | cut -c1-12)-$(date +%s)"
	if systemd-run --user --quiet --collect --unit="$unit" -p KillMode=process /bin/sh -c "$run" sh "$d" "$@" < /dev/null > /dev/null 2>&1; then
		echo "launcher=systemd-run"
		exit 0
	fi
fi
setsid sh -c "$run" sh "$d" "$@" < /dev/null > /dev/null 2>&1 &
echo "launcher=setsid"`

func (f *Fleet) start(ctx context.Context, h ssh.Host, l Layout, flags []string) (string, error) {
	out, err := f.script(ctx, h, startScript, append([]string{l.Dir}, flags...)...)
	if err != nil {
		return "", fmt.Errorf("start agent: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "launcher="); ok {
			f.log.Debug("agent started", logServer, h.Name, "launcher", v, logDir, l.Dir)
			return v, nil
		}
	}
	return "", fmt.Errorf("start agent: unexpected output %q", out)
}

// status asks the agent at l for its status within timeout.
func (f *Fleet) status(ctx context.Context, s cluster.Server, l Layout, timeout time.Duration) (agentStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := f.Client(s, l).Status(ctx)
	if err != nil {
		return agentStatus{}, err
	}
	return agentStatus{Version: st.Version, GPUCount: st.GPUCount}, nil
}

type agentStatus struct {
	Version  string
	GPUCount int
}

// waitReady polls the agent's Status until it answers or timeout passes;
// on timeout the error carries the end of agent.log.
func (f *Fleet) waitReady(ctx context.Context, s cluster.Server, l Layout, timeout time.Duration) (agentStatus, error) {
	deadline := time.Now().Add(timeout)
	wait := 50 * time.Millisecond
	var last error
	for {
		st, err := f.status(ctx, s, l, 3*time.Second)
		if err == nil {
			return st, nil
		}
		last = err
		if ctx.Err() != nil {
			return agentStatus{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return agentStatus{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	tail, _ := f.pool.Output(ctx, ssh.HostFromServer(s), "tail", "-n", "5", l.Log)
	msg := strings.TrimSpace(string(tail))
	if msg == "" {
		msg = "(empty)"
	}
	return agentStatus{}, fmt.Errorf("agent did not answer on %s within %s: %v; %s says: %s", l.Socket, timeout, last, l.Log, msg)
}

// script runs a shell script with positional arguments on h and returns
// its stdout. Errors name the exit status and stderr, not the script.
func (f *Fleet) script(ctx context.Context, h ssh.Host, script string, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	err := f.pool.Run(ctx, h, ssh.Cmd{Args: argv, Stdout: &out, Stderr: &errb})
	if err != nil {
		var ee *xssh.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("exit status %d: %s", ee.ExitStatus(), strings.TrimSpace(errb.String()))
		}
		return nil, err
	}
	return out.Bytes(), nil
}
