package ssh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"
)

// Quote quotes s for a POSIX shell so that it reaches the command as one
// argument, byte for byte: 'it'\”s'. Safe characters are left bare.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QuoteArgs quotes each argument and joins them with spaces.
func QuoteArgs(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// Cmd is a command to run on a server.
type Cmd struct {
	// Args is the argv; every element is quoted, so no element is ever
	// interpreted by the remote shell.
	Args []string
	// Script, used when Args is empty, is passed to the remote shell
	// verbatim. Callers must Quote anything they interpolate.
	Script string
	// Dir, if set, is the working directory.
	Dir string
	// Stdin, Stdout and Stderr are streamed; nil discards output and gives
	// an empty stdin.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Command is a Cmd running argv.
func Command(args ...string) Cmd { return Cmd{Args: args} }

func (c Cmd) shell() (string, error) {
	var body string
	switch {
	case len(c.Args) > 0:
		body = QuoteArgs(c.Args...)
	case c.Script != "":
		body = c.Script
	default:
		return "", errors.New("empty command")
	}
	if c.Dir != "" {
		body = "cd " + Quote(c.Dir) + " || exit 1\n" + body
	}
	return body, nil
}

// pidMarker precedes the remote shell's pid on the first line of stdout.
const pidMarker = "replan-pid "

// wrap makes the remote shell print its pid (also its process group and
// session: sshd starts every non-pty command with setsid) before running
// the command in a child shell of the same group, so that a cancellation
// can kill the whole group. Args-based commands are exec'd.
func wrap(body string) string {
	return "echo " + pidMarker + "$$; exec sh -c " + Quote(body)
}

// Run runs cmd on h and waits for it. Cancelling ctx ends the remote
// process group: the session gets SIGTERM, and, since sshd often ignores
// signals for sessions without a pty, a second session sends
// `kill -TERM -PGID`, then `kill -KILL -PGID` after Config.KillGrace. A
// non-zero exit is an error wrapping *ssh.ExitError.
func (p *Pool) Run(ctx context.Context, h Host, cmd Cmd) error {
	body, err := cmd.shell()
	if err != nil {
		return fmt.Errorf("run on %s: %w", h, err)
	}
	name := describe(cmd)
	c, err := p.acquire(ctx, h)
	if err != nil {
		return err
	}
	defer c.release()
	sess, client, err := p.session(ctx, h)
	if err != nil {
		return fmt.Errorf("run %s on %s: %w", name, h, err)
	}
	defer sess.Close()

	stdout, err := sess.StdoutPipe()
	if err != nil {
		return fmt.Errorf("run %s on %s: %w", name, h, err)
	}
	if cmd.Stderr != nil {
		sess.Stderr = cmd.Stderr
	}
	if cmd.Stdin != nil {
		sess.Stdin = cmd.Stdin
	}
	if err := sess.Start(wrap(body)); err != nil {
		return fmt.Errorf("run %s on %s: %w", name, h, err)
	}

	pidc := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, rerr := br.ReadString('\n')
		pid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, pidMarker)))
		pidc <- pid
		out := cmd.Stdout
		if out == nil {
			out = io.Discard
		}
		if rerr == nil {
			_, rerr = io.Copy(out, br)
		}
		werr := sess.Wait()
		if werr == nil && rerr != nil && rerr != io.EOF {
			werr = rerr
		}
		done <- werr
	}()

	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("run %s on %s: %w", name, h, err)
		}
		return nil
	case <-ctx.Done():
	}
	_ = sess.Signal(xssh.SIGTERM)
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(p.cfg.ConnectTimeout):
	}
	if pid > 1 {
		if err := p.killGroup(client, pid); err != nil {
			p.log.Warn("ssh kill after cancel failed", "host", h.key(), "pid", pid, "err", err)
		}
	}
	sess.Close()
	select {
	case <-done:
	case <-time.After(p.cfg.ConnectTimeout):
	}
	return fmt.Errorf("run %s on %s: %w", name, h, ctx.Err())
}

// killGroup kills process group pgid over a separate session. It does not
// take a session slot (MaxSessions stays below sshd's limit for this).
func (p *Pool) killGroup(client *xssh.Client, pgid int) error {
	s, err := client.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	g := strconv.Itoa(pgid)
	steps := int(p.cfg.KillGrace / (50 * time.Millisecond))
	script := "kill -TERM -- -" + g + " 2>/dev/null; i=0; " +
		"while kill -0 -- -" + g + " 2>/dev/null && [ $i -lt " + strconv.Itoa(steps) + " ]; do sleep 0.05; i=$((i+1)); done; " +
		"kill -KILL -- -" + g + " 2>/dev/null; true"
	errc := make(chan error, 1)
	go func() { errc <- s.Run(script) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(p.cfg.KillGrace + p.cfg.ConnectTimeout):
		return errors.New("kill session did not finish")
	}
}

// Output runs argv on h and returns its stdout; stderr is included in the
// error when the command fails.
func (p *Pool) Output(ctx context.Context, h Host, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	err := p.Run(ctx, h, Cmd{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil && errb.Len() > 0 {
		err = fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), err
}

func describe(c Cmd) string {
	s := c.Script
	if len(c.Args) > 0 {
		s = QuoteArgs(c.Args...)
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}
