package tui

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
)

// Options tune the program; the zero value is what `replan tui` uses.
type Options struct {
	// Profile is the terminal's colour profile; colorprofile.Unknown (the
	// zero value) detects it from Output and the environment, which
	// honours NO_COLOR.
	Profile colorprofile.Profile
	// PollEvery is how often status, servers, queue and jobs are polled
	// (1 s when zero).
	PollEvery time.Duration
	// EventWait is how long one long poll of the event stream waits
	// (20 s when zero).
	EventWait time.Duration
	// CallTimeout bounds every other backend call (5 s when zero).
	CallTimeout time.Duration
	// MaxBackoff caps the retry delay after a lost connection (30 s when
	// zero).
	MaxBackoff time.Duration
	// Input and Output default to the terminal (stdin, stdout).
	Input  io.Reader
	Output io.Writer
	// Title names the cluster in the title bar ("replan" when empty).
	Title string
	// NoAltScreen keeps the program in the normal screen buffer.
	NoAltScreen bool
}

func (o Options) withDefaults() Options {
	if o.PollEvery <= 0 {
		o.PollEvery = time.Second
	}
	if o.EventWait <= 0 {
		o.EventWait = 20 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 5 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Title == "" {
		o.Title = "replan"
	}
	return o
}

// Run runs the TUI on the terminal (in the alternate screen) until the user
// quits or ctx ends; ending ctx is not an error.
func Run(ctx context.Context, b Backend, opts Options) error {
	opts = opts.withDefaults()
	out := opts.Output
	if out == nil {
		out = os.Stdout
	}
	if opts.Profile == colorprofile.Unknown {
		opts.Profile = colorprofile.Detect(out, os.Environ())
	}
	m := newModel(ctx, b, opts)
	popts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithColorProfile(opts.Profile), tea.WithOutput(out)}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	_, err := tea.NewProgram(m, popts...).Run()
	if err != nil && errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, tea.ErrInterrupted) {
		return nil
	}
	return err
}
