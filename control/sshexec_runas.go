package control

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/launch"
)

// What the executor does on a server on behalf of a job (read its
// checkpoint marker, write its launch files into its directories, convert
// its checkpoint) runs through the server's agent as the job's run_as user
// (agent.RunCommand: setpriv, as its ranks run), with the job's
// environment passed as the command's environment — never as the SSH user,
// and never with a secret on a command line.

// runAs is the Unix user l's processes run as on the servers: its
// tenant's run_as, "" for the agent's own user.
func (e *SSHExecutor) runAs(l Launch) string {
	if l.Spec == nil {
		return ""
	}
	return e.opt.RunAs[l.Spec.Tenant]
}

// runForJob runs req on server through its agent as l's run_as user.
func (e *SSHExecutor) runForJob(ctx context.Context, l Launch, server string, req agent.RunRequest) (agent.RunResult, error) {
	c, err := e.client(ctx, server)
	if err != nil {
		return agent.RunResult{}, fmt.Errorf("agent on %s: %w", server, err)
	}
	req.RunAs = e.runAs(l)
	return c.Run(ctx, req)
}

// readJobFile reads at most limit bytes of file on server as l's user; a
// missing file reads as empty.
func (e *SSHExecutor) readJobFile(ctx context.Context, l Launch, server, file string, limit int) ([]byte, error) {
	res, err := e.runForJob(ctx, l, server, agent.RunRequest{
		Argv: []string{"sh", "-c", `test -f "$1" || exit 0; head -c "$2" "$1"`, "read", file, strconv.Itoa(limit)},
	})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return res.Stdout, nil
}

// writeFileScript writes its standard input to a file as the user it
// runs as: $1 is the mode, $2 the directory the job owns (created when
// missing), then the names of the directories below it and the file's
// name. A directory or file below $2 that is a symbolic link is refused
// (exit 3) rather than followed: a job must not redirect replan's writes.
// The content goes to a temporary file renamed over the target. Servers
// that share a filesystem may run it for one directory at once.
const writeFileScript = `set -e
mode=$1; d=$2; shift 2
mkdir -p -- "$d"
while [ $# -gt 1 ]; do
	d=$d/$1; shift
	if [ -L "$d" ]; then echo "$d is a symbolic link: refusing to write through it" >&2; exit 3; fi
	# Servers on one shared filesystem create the same directory at once.
	[ -d "$d" ] || e=$(mkdir -- "$d" 2>&1) || [ -d "$d" ] || { echo "$e" >&2; exit 1; }
	if [ -L "$d" ]; then echo "$d is a symbolic link: refusing to write through it" >&2; exit 3; fi
done
f=$d/$1
if [ -L "$f" ]; then echo "$f is a symbolic link: refusing to write over it" >&2; exit 3; fi
t=$(mktemp "$d/.$1.replan-XXXXXX")
trap 'rm -f -- "$t"' EXIT
cat > "$t"
chmod "$mode" "$t"
mv -fT -- "$t" "$f"
trap - EXIT`

// writeFiles creates the directories of sl's files and writes them, each
// atomically, as l's user. Below the job's checkpoint directory no
// symbolic link is followed (writeFileScript).
func (e *SSHExecutor) writeFiles(ctx context.Context, l Launch, sl launch.ServerLaunch) error {
	paths := make([]string, 0, len(sl.Files))
	for p := range sl.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	base := "/"
	if l.Spec != nil && l.Spec.CheckpointDir != "" {
		base = path.Clean(l.Spec.CheckpointDir)
	}
	for _, p := range paths {
		p = path.Clean(p)
		b := base
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(b, "/")+"/")
		if !ok {
			b, rel = "/", strings.TrimPrefix(p, "/")
		}
		args := append([]string{"sh", "-c", writeFileScript, "write", "0644", b}, strings.Split(rel, "/")...)
		res, err := e.runForJob(ctx, l, sl.Server, agent.RunRequest{Argv: args, Stdin: []byte(sl.Files[p])})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		if err != nil {
			return fmt.Errorf("write %s on %s%s: %w", p, sl.Server, asUser(e.runAs(l)), err)
		}
	}
	return nil
}

// asUser is " as NAME" for a run_as user, "" for the agent's own.
func asUser(name string) string {
	if name == "" {
		return ""
	}
	return " as " + name
}

// convert runs a conversion step's argv on the master server through its
// agent as the job's user, in the job's working directory (/ when it has
// none) with the job's environment as the command's environment (so a
// PATH that names the job's Python applies), ${TAG} replaced by the
// checkpoint tag.
func (e *SSHExecutor) convert(ctx context.Context, l Launch, s launch.Step, tag string) error {
	if len(s.Argv) == 0 {
		return nil
	}
	server := l.Servers[0].Name
	if len(s.Servers) > 0 {
		server = s.Servers[0]
	}
	argv := make([]string, len(s.Argv))
	for i, a := range s.Argv {
		argv[i] = strings.ReplaceAll(a, "${TAG}", tag)
	}
	res, err := e.runForJob(ctx, l, server, agent.RunRequest{Argv: argv, Env: l.Spec.Env, Dir: l.Spec.WorkDir})
	if ae, ok := agent.AsAPIError(err); ok && ae.Field == "argv" {
		return fmt.Errorf("convert on %s: the checkpoint converter is missing (%s); install DeepSpeed there or put its Python first on the job's PATH (env)", server, ae.Message)
	}
	if err != nil {
		return fmt.Errorf("convert on %s%s: %s: %w", server, asUser(e.runAs(l)), strings.Join(argv, " "), err)
	}
	if res.ExitCode == 0 {
		e.log.Info("converted checkpoint", "job", l.JobID, "server", server, "tag", tag, "run_as", e.runAs(l))
		return nil
	}
	msg := strings.TrimSpace(res.Stderr)
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	if res.ExitCode == 127 || res.ExitCode == 126 || strings.Contains(msg, "No module named") {
		return fmt.Errorf("convert on %s: the checkpoint converter is missing (%s exited %d); install DeepSpeed there or put its Python first on the job's PATH (env)%s", server, argv[0], res.ExitCode, quoteLines(msg, 5))
	}
	// Its output (the job's Python's) ends the error, as quoted log lines
	// (redact.go).
	return fmt.Errorf("convert on %s%s: %s: exit status %d%s", server, asUser(e.runAs(l)), strings.Join(argv, " "), res.ExitCode, quoteLines(msg, 5))
}
