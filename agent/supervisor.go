package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/replan/replan/agent/logparse"
	"golang.org/x/sys/unix"
)

// Process states.
const (
	StateRunning = "running"
	StateExited  = "exited"
)

// Errors callers branch on. Validation problems are *FieldError.
var (
	ErrNotFound = errors.New("process not found")
	ErrConflict = errors.New("process conflict")
)

// FieldError names the request field that is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ProcessSpec is what to start.
type ProcessSpec struct {
	// ID names the process on this server: letters, digits, '.', '_', '-'.
	ID   string   `json:"id"`
	Argv []string `json:"argv"`
	// Env is added to (and overrides) the agent's own environment.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory (absolute, must exist); empty means the
	// process's directory in the agent's state dir.
	Dir string `json:"dir,omitempty"`
	// CPUs binds the process to these CPU numbers; empty means no binding.
	CPUs []int `json:"cpus,omitempty"`
	// MemoryBytes limits memory through cgroup v2 when it can; 0 = none.
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// RunAs is the Unix user the command runs as (its tenant's run_as);
	// empty: the agent's own user. Another user than the agent's needs the
	// agent to run as root; the command is then started through setpriv
	// (util-linux) with that user's uid, gid and groups, while the agent's
	// wrapper shell (root) keeps recording its exit status.
	RunAs string `json:"run_as,omitempty"`
}

// ProcessInfo is a supervised process as the API reports it and as it is
// recorded on disk (state dir, procs/ID/process.json).
type ProcessInfo struct {
	Spec  ProcessSpec `json:"spec"`
	PID   int         `json:"pid"`
	State string      `json:"state"`
	// Adopted is true when this agent re-adopted the process after a
	// restart (it is then not the agent's child).
	Adopted   bool       `json:"adopted,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	ExitedAt  *time.Time `json:"exited_at,omitempty"`
	// ExitCode is the command's exit status, 128+N when killed by signal N
	// (shell convention); nil when unknown.
	ExitCode *int `json:"exit_code,omitempty"`
	// Signal names the signal that ended the wrapper, when known.
	Signal string `json:"signal,omitempty"`
	// ExitReason explains the end in words.
	ExitReason    string `json:"exit_reason,omitempty"`
	StopRequested bool   `json:"stop_requested,omitempty"`
	// MemoryLimit says whether MemoryBytes is enforced, and if not why:
	// "enforced by cgroup /sys/fs/cgroup/replan/ID" or
	// "memory limit not enforced: <why>". Empty when no limit was asked.
	MemoryLimit string `json:"memory_limit,omitempty"`
	LogPath     string `json:"log_path"`

	// Identity of the process across agent restarts.
	StartTicks uint64 `json:"start_ticks"`
	BootID     string `json:"boot_id"`
	Cgroup     string `json:"cgroup,omitempty"`
}

// SupervisorConfig configures a Supervisor. Zero values get defaults.
type SupervisorConfig struct {
	// StateDir holds procs/ID/{process.json,output.log*,exit_status}.
	StateDir string
	Log      *slog.Logger
	Clock    Clock
	// LogMaxBytes rotates output.log when it grows past it (default 64 MiB).
	LogMaxBytes int64
	// LogKeep is how many rotated files to keep (default 3).
	LogKeep int
	// PollInterval paces log tailing and exit polling of re-adopted
	// processes (default 1s).
	PollInterval time.Duration
	// CgroupMount and CgroupRoot locate cgroup v2 and replan's subtree
	// (defaults /sys/fs/cgroup and /sys/fs/cgroup/replan).
	CgroupMount, CgroupRoot string
	// MaxSamples bounds the throughput samples kept per process (default 4096).
	MaxSamples int
	// Shell runs the exit-recording wrapper (default /bin/sh).
	Shell string
	// LeaseFile is the agent's lease ("DEADLINE GRACE", lease.go): every
	// wrapper shell checks it each second and, once the deadline (Unix
	// seconds) has passed, stops its process group itself (SIGTERM,
	// SIGKILL after GRACE seconds), so a process is fenced even while its
	// agent is dead. Empty: no such watch.
	LeaseFile string
}

// Supervisor starts, watches, stops and re-adopts processes. Processes run
// in their own session and survive the agent; Close stops watching them but
// never stops them.
type Supervisor struct {
	cfg    SupervisorConfig
	log    *slog.Logger
	clock  Clock
	cg     cgroupMemory
	boot   string
	ctx    context.Context // watchers' lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lock   *os.File // flock on STATE/lock: one agent per state dir

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	s    *Supervisor
	dir  string
	done chan struct{} // closed once the process has exited

	mu       sync.Mutex
	info     ProcessInfo
	killed   bool // SIGKILL sent by this agent
	stopSent bool // this agent began a stop sequence
	samples  []logparse.Sample
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// wrapperScript runs the command in the background of a shell that records
// its exit status in the file named by $1 and forwards TERM and INT to it.
// With a lease file ($2, SupervisorConfig.LeaseFile) a watchdog subshell
// stops the whole process group once the lease's deadline has passed:
// SIGKILL at once when the lease's grace is 0 (a fenced process must not
// checkpoint: a SIGTERM has it start writing one, and a SIGKILL right
// after leaves a checkpoint its trail never recorded), else SIGTERM and
// SIGKILL after the grace.
// The shell's own messages (e.g. "Terminated") go to /dev/null; the command
// keeps the real stderr. A trapped signal interrupts `wait`, so it waits
// again: for a command that ended meanwhile the shell still remembers its
// status, and 127 means the previous wait had already returned it.
const wrapperScript = `f=$1; l=$2; shift 2
exec 3>&2 2>/dev/null
t=0
trap 't=1; kill -TERM "$c"' TERM
trap 't=1; kill -INT "$c"' INT
"$@" 2>&3 3>&- &
c=$!
exec 3>&-
if [ -n "$l" ]; then
  (
    trap '' TERM INT
    while kill -0 "$c"; do
      sleep 1
      [ -f "$l" ] || continue
      read d g < "$l" || continue
      case "$d:$g" in *[!0-9:]*|:*|*:) continue ;; esac
      [ "$(date +%s)" -gt "$d" ] || continue
      if [ "$g" = 0 ]; then kill -KILL 0; fi
      kill -TERM 0
      sleep "$g"
      kill -KILL 0
      exit
    done
  ) </dev/null >/dev/null &
fi
s=
while :; do
  t=0
  wait "$c"; r=$?
  if [ "$t" = 0 ]; then s=$r; break; fi
  if [ "$r" = 127 ]; then break; fi
  s=$r
done
printf '%s\n' "$s" > "$f.tmp" && mv -f "$f.tmp" "$f"
exit "$s"`

// OpenSupervisor loads the records in cfg.StateDir, re-adopts the processes
// still running (same PID, same start time, same boot) and marks the others
// exited, reading their exit status from the wrapper's exit file when there
// is one.
func OpenSupervisor(ctx context.Context, cfg SupervisorConfig) (*Supervisor, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("supervisor: empty state dir")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.LogMaxBytes <= 0 {
		cfg.LogMaxBytes = 64 << 20
	}
	if cfg.LogKeep <= 0 {
		cfg.LogKeep = 3
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.CgroupMount == "" {
		cfg.CgroupMount = "/sys/fs/cgroup"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = filepath.Join(cfg.CgroupMount, "replan")
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = 4096
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "procs"), 0o700); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.StateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("supervisor: state dir %s is in use by another agent: %w", cfg.StateDir, err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Supervisor{cfg: cfg, log: cfg.Log, clock: cfg.Clock, boot: bootID(), ctx: wctx, cancel: cancel, lock: lock,
		cg: cgroupMemory{mount: cfg.CgroupMount, root: cfg.CgroupRoot}, procs: map[string]*proc{}}
	if err := s.load(); err != nil {
		cancel()
		lock.Close()
		return nil, err
	}
	return s, nil
}

func (s *Supervisor) procDir(id string) string { return filepath.Join(s.cfg.StateDir, "procs", id) }

func (s *Supervisor) load() error {
	ents, err := os.ReadDir(filepath.Join(s.cfg.StateDir, "procs"))
	if err != nil {
		return fmt.Errorf("supervisor: read state: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !idPattern.MatchString(e.Name()) {
			continue
		}
		dir := s.procDir(e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "process.json"))
		if err != nil {
			s.log.Warn("skipping process without record", "dir", dir, "err", err)
			continue
		}
		var info ProcessInfo
		if err := json.Unmarshal(b, &info); err != nil || info.Spec.ID != e.Name() {
			s.log.Warn("skipping unreadable process record", "dir", dir, "err", err)
			continue
		}
		p := &proc{s: s, dir: dir, info: info, done: make(chan struct{})}
		s.procs[info.Spec.ID] = p
		if info.State != StateRunning {
			close(p.done)
			continue
		}
		if info.BootID == s.boot && sameProcessAlive(info.PID, info.StartTicks) {
			p.info.Adopted = true
			if err := p.persist(); err != nil {
				s.log.Warn("persist adopted process", "id", info.Spec.ID, "err", err)
			}
			s.log.Info("re-adopted process", "id", info.Spec.ID, "pid", info.PID)
			s.wg.Add(2)
			go p.pollExit()
			go p.tail()
			continue
		}
		reason := "not running when the agent started"
		if info.BootID != s.boot {
			reason = "server rebooted"
		}
		p.finish(nil, reason)
		close(p.done)
	}
	return nil
}

// Close stops watching processes; the processes keep running and a later
// OpenSupervisor on the same state dir re-adopts them.
func (s *Supervisor) Close() error {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock != nil {
		s.lock.Close() // releases the flock
		s.lock = nil
	}
	return nil
}

func (s *Supervisor) validate(spec *ProcessSpec) error {
	if !idPattern.MatchString(spec.ID) {
		return &FieldError{"id", fmt.Sprintf("%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.ID)}
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return &FieldError{"argv", "must name a command"}
	}
	for k := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &FieldError{"env", fmt.Sprintf("bad variable name %q", k)}
		}
	}
	if spec.Dir != "" {
		if !filepath.IsAbs(spec.Dir) {
			return &FieldError{"dir", fmt.Sprintf("%q is not absolute", spec.Dir)}
		}
		if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
			return &FieldError{"dir", fmt.Sprintf("%q is not a directory", spec.Dir)}
		}
	}
	if spec.RunAs != "" {
		if _, err := runAsArgv(spec.RunAs); err != nil {
			return &FieldError{"run_as", err.Error()}
		}
	}
	if len(spec.CPUs) > 0 {
		allowed, err := allowedCPUs()
		if err != nil {
			return fmt.Errorf("read agent CPU affinity: %w", err)
		}
		seen := map[int]bool{}
		for _, c := range spec.CPUs {
			if !allowed[c] {
				return &FieldError{"cpus", fmt.Sprintf("CPU %d is not available on this server", c)}
			}
			if seen[c] {
				return &FieldError{"cpus", fmt.Sprintf("CPU %d listed twice", c)}
			}
			seen[c] = true
		}
	}
	path := os.Getenv("PATH")
	if v, ok := spec.Env["PATH"]; ok {
		path = v
	}
	if !findExecutable(spec.Argv[0], path, spec.Dir) {
		return &FieldError{"argv", fmt.Sprintf("executable %q not found", spec.Argv[0])}
	}
	return nil
}

// findExecutable reports whether name resolves to an executable file the way
// the shell will look it up.
func findExecutable(name, path, dir string) bool {
	_, ok := lookExecutable(name, path, dir)
	return ok
}

// lookExecutable returns the file name resolves to, looked up the way the
// shell does with PATH path, relative names from dir.
func lookExecutable(name, path, dir string) (string, bool) {
	isExec := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) && dir != "" {
			name = filepath.Join(dir, name)
		}
		return name, isExec(name)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) && dir != "" {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, name); isExec(p) {
			return p, true
		}
	}
	return "", false
}

// Start validates spec, records it and starts the process. A memory limit
// that cannot be enforced is reported in ProcessInfo.MemoryLimit, never as
// an error.
func (s *Supervisor) Start(ctx context.Context, spec ProcessSpec) (ProcessInfo, error) {
	if err := s.validate(&spec); err != nil {
		return ProcessInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return ProcessInfo{}, errors.New("supervisor closed")
	}
	if _, ok := s.procs[spec.ID]; ok {
		return ProcessInfo{}, fmt.Errorf("%w: id %q already exists (delete it first)", ErrConflict, spec.ID)
	}
	dir := s.procDir(spec.ID)
	if err := os.RemoveAll(dir); err != nil {
		return ProcessInfo{}, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ProcessInfo{}, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	logPath := filepath.Join(dir, "output.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	defer devnull.Close()

	workDir := spec.Dir
	if workDir == "" {
		workDir = dir
	}
	argv, extraEnv := spec.Argv, spec.Env
	if spec.RunAs != "" {
		prefix, err := runAsArgv(spec.RunAs)
		if err != nil {
			return ProcessInfo{}, &FieldError{"run_as", err.Error()}
		}
		argv = append(prefix, spec.Argv...)
		if len(prefix) > 0 {
			u, _ := user.Lookup(spec.RunAs)
			extraEnv = map[string]string{"HOME": u.HomeDir, "USER": u.Username, "LOGNAME": u.Username}
			for k, v := range spec.Env {
				extraEnv[k] = v
			}
		}
	}
	args := append([]string{"-c", wrapperScript, "replan-wrap", filepath.Join(dir, "exit_status"), s.cfg.LeaseFile}, argv...)
	env := mergeEnv(os.Environ(), extraEnv, spec.ID)
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(s.cfg.Shell, args...)
		cmd.Dir = workDir
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
		// Own session (and so own process group): the process survives
		// the agent and a stop signals the whole group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd
	}
	cmd := newCmd()

	info := ProcessInfo{Spec: spec, State: StateRunning, LogPath: logPath, BootID: s.boot}
	var cgFD *os.File
	if spec.MemoryBytes > 0 {
		cgDir, fd, err := s.cg.prepare(spec.ID, spec.MemoryBytes)
		if err != nil {
			info.MemoryLimit = "memory limit not enforced: " + err.Error()
		} else {
			cgFD, info.Cgroup = fd, cgDir
			info.MemoryLimit = "enforced by cgroup " + cgDir
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = int(fd.Fd())
		}
	}
	err = startPinned(cmd, spec.CPUs)
	if err != nil && cgFD != nil {
		// clone3 into a cgroup needs Linux 5.7; start without the limit.
		s.log.Warn("start in cgroup failed, retrying without", "id", spec.ID, "err", err)
		cgFD.Close()
		cgFD = nil
		s.cg.remove(info.Cgroup)
		info.MemoryLimit = "memory limit not enforced: start in cgroup " + info.Cgroup + ": " + err.Error()
		info.Cgroup = ""
		cmd = newCmd()
		err = startPinned(cmd, spec.CPUs)
	}
	if cgFD != nil {
		cgFD.Close()
	}
	if err != nil {
		s.cg.remove(info.Cgroup)
		os.RemoveAll(dir)
		return ProcessInfo{}, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	info.PID = cmd.Process.Pid
	info.StartedAt = s.clock.Now()
	if st, err := readProcStat(info.PID); err == nil {
		info.StartTicks = st.StartTicks
	}
	p := &proc{s: s, dir: dir, info: info, done: make(chan struct{})}
	if err := p.persist(); err != nil {
		// Without a record the process could not be re-adopted: refuse it.
		_ = syscall.Kill(-info.PID, syscall.SIGKILL)
		_ = cmd.Wait()
		os.RemoveAll(dir)
		return ProcessInfo{}, fmt.Errorf("start %s: record: %w", spec.ID, err)
	}
	s.procs[spec.ID] = p
	s.log.Info("started process", "id", spec.ID, "pid", info.PID, "argv", spec.Argv, "memory_limit", info.MemoryLimit)
	s.wg.Add(1)
	go p.tail()
	go p.waitChild(cmd) // not in wg: cmd.Wait cannot be cancelled
	return info, nil
}

// runAsArgv is the command prefix that runs a command as the Unix user
// name: nothing when the agent already is that user, setpriv with the
// user's ids when the agent is root; an error otherwise.
func runAsArgv(name string) ([]string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("no Unix user %q on this server", name)
	}
	if u.Uid == strconv.Itoa(os.Geteuid()) {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the agent runs as uid %d, not root: it cannot start processes as %s", os.Geteuid(), name)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("running processes as %s needs setpriv (util-linux) on this server", name)
	}
	return []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}, nil
}

func mergeEnv(base []string, extra map[string]string, id string) []string {
	out := make([]string, 0, len(base)+len(extra)+1)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; over || k == "REPLAN_PROCESS_ID" {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return append(out, "REPLAN_PROCESS_ID="+id)
}

// persist writes the record atomically (temp file, fsync, rename).
func (p *proc) persist() error {
	b, err := json.MarshalIndent(p.info, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.dir, "process.json"), append(b, '\n'))
}

func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// waitChild waits for a process this agent started.
func (p *proc) waitChild(cmd *exec.Cmd) {
	_ = cmd.Wait()
	if p.s.ctx.Err() != nil {
		return // closed: the next agent adopts and records the exit
	}
	p.mu.Lock()
	p.finish(cmd.ProcessState, "")
	p.mu.Unlock()
	close(p.done)
}

// pollExit watches a re-adopted process through /proc.
func (p *proc) pollExit() {
	defer p.s.wg.Done()
	t := time.NewTicker(p.s.cfg.PollInterval)
	defer t.Stop()
	for {
		if !sameProcessAlive(p.info.PID, p.info.StartTicks) {
			p.mu.Lock()
			p.finish(nil, "")
			p.mu.Unlock()
			close(p.done)
			return
		}
		select {
		case <-p.s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// finish records the exit. ps is the wait status when the agent is the
// parent. Callers hold p.mu (or own p exclusively).
func (p *proc) finish(ps *os.ProcessState, reason string) {
	now := p.s.clock.Now()
	in := &p.info
	in.State = StateExited
	in.ExitedAt = &now
	if code, ok := readExitFile(filepath.Join(p.dir, "exit_status")); ok {
		in.ExitCode = &code
		if code > 128 && code < 128+65 {
			in.Signal = signalName(syscall.Signal(code - 128))
		}
		if reason == "" {
			reason = "exited with status " + strconv.Itoa(code)
		}
	} else if ps != nil {
		ws, _ := ps.Sys().(syscall.WaitStatus)
		code := ps.ExitCode()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
			in.Signal = signalName(ws.Signal())
		}
		in.ExitCode = &code
		if reason == "" {
			reason = ps.String()
		}
	} else if p.killed {
		code := 128 + int(syscall.SIGKILL)
		in.ExitCode, in.Signal = &code, signalName(syscall.SIGKILL)
		if reason == "" {
			reason = "killed by the agent after the grace period"
		}
	} else if reason == "" {
		reason = "exit status unknown: the wrapper left no exit file"
	} else {
		reason += "; exit status unknown"
	}
	if p.killed && !strings.Contains(reason, "grace") {
		reason += " (SIGKILL after grace period)"
	}
	in.ExitReason = reason
	p.s.cg.remove(in.Cgroup)
	if err := p.persist(); err != nil {
		p.s.log.Error("record process exit", "id", in.Spec.ID, "err", err)
	}
	p.s.log.Info("process exited", "id", in.Spec.ID, "pid", in.PID, "reason", reason)
}

func readExitFile(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return "signal " + strconv.Itoa(int(sig))
}

func (s *Supervisor) get(id string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return p, nil
}

// Get returns one process.
func (s *Supervisor) Get(id string) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// List returns every known process, ordered by ID.
func (s *Supervisor) List() []ProcessInfo {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		out = append(out, p.info)
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// Samples returns the throughput samples parsed so far, oldest first; with
// a non-zero since, only those stamped after it.
func (s *Supervisor) Samples(id string, since time.Time) ([]logparse.Sample, error) {
	p, err := s.get(id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	if !since.IsZero() {
		i = sort.Search(len(p.samples), func(i int) bool { return p.samples[i].Time.After(since) })
	}
	return append([]logparse.Sample{}, p.samples[i:]...), nil
}

// LogPath returns the path of the process's current log file.
func (s *Supervisor) LogPath(id string) (string, error) {
	p, err := s.get(id)
	if err != nil {
		return "", err
	}
	return p.info.LogPath, nil
}

// Done returns a channel closed when the process has exited.
func (s *Supervisor) Done(id string) (<-chan struct{}, error) {
	p, err := s.get(id)
	if err != nil {
		return nil, err
	}
	return p.done, nil
}

// Wait blocks until the process has exited or ctx is done.
func (s *Supervisor) Wait(ctx context.Context, id string) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	return s.Get(id)
}

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL, and returns once the process has exited (or ctx is done: the
// stop sequence itself carries on, detached from ctx). Stopping an exited
// process returns its record.
func (s *Supervisor) Stop(ctx context.Context, id string, grace time.Duration) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	p.mu.Lock()
	first := p.info.State == StateRunning && !p.stopSent
	if first {
		p.stopSent = true
		p.info.StopRequested = true
		if err := p.persist(); err != nil {
			s.log.Warn("record stop request", "id", id, "err", err)
		}
	}
	pid := p.info.PID
	p.mu.Unlock()
	if first {
		s.log.Info("stopping process", "id", id, "pid", pid, "grace", grace)
		if grace <= 0 {
			// No grace: SIGKILL at once (a fenced orphan saves no
			// checkpoint: SIGTERM would have it write one).
			p.mu.Lock()
			p.killed = true
			p.mu.Unlock()
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		} else {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-p.done:
			case <-s.ctx.Done():
				return
			case <-t.C:
				p.mu.Lock()
				p.killed = true
				p.mu.Unlock()
				s.log.Warn("grace period over, killing process group", "id", id, "pid", pid)
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				<-p.done
			}
			// Leftovers of the group (the leader is gone, the group may not be).
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}()
	}
	return s.Wait(ctx, id)
}

// Delete forgets an exited process and removes its records and logs.
func (s *Supervisor) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[id]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	select {
	case <-p.done:
	default:
		return fmt.Errorf("%w: %q is still running; stop it first", ErrConflict, id)
	}
	delete(s.procs, id)
	return os.RemoveAll(p.dir)
}
