package cli

// Filters and accounting (issue 28): --user, --tenant and --state on
// queue, jobs, events and history (applied by the daemon); history's
// per-attempt lines like sacct's; usage's GPU-hours per tenant and user
// like sreport's.

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
)

// filterFlags are --user, --tenant, --state (and --since, --until).
type filterFlags struct {
	users, tenants, states []string
	since, until           string
}

// add declares the filter flags on cmd; withTime adds --since and
// --until, withState --state.
func (ff *filterFlags) add(cmd *cobra.Command, withState, withTime bool) {
	cmd.Flags().StringSliceVar(&ff.users, "user", nil, "only jobs submitted by these users (comma list; events: also those the user caused)")
	cmd.Flags().StringSliceVar(&ff.tenants, "tenant", nil, "only jobs of these tenants (comma list)")
	if withState {
		cmd.Flags().StringSliceVar(&ff.states, "state", nil, "only jobs in these states (comma list: queued, held, running, preempted, unschedulable, finished, failed, cancelled)")
	}
	if withTime {
		cmd.Flags().StringVar(&ff.since, "since", "", "from this time: 2026-11-22, 2026-11-22T08:00 (local), RFC 3339, or a duration ago (24h, 7d)")
		cmd.Flags().StringVar(&ff.until, "until", "", "up to this time (same forms as --since); default: now")
	}
}

// filter is the flags as the daemon's filter; now anchors "24h" and "7d".
func (ff *filterFlags) filter(now time.Time) (control.ReadFilter, error) {
	f := control.ReadFilter{Users: ff.users, Tenants: ff.tenants}
	for _, s := range ff.states {
		f.States = append(f.States, control.JobState(strings.ToLower(strings.TrimSpace(s))))
	}
	var err error
	if f.Since, err = parseWhen(ff.since, now); err != nil {
		return f, fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = parseWhen(ff.until, now); err != nil {
		return f, fmt.Errorf("--until: %w", err)
	}
	return f, nil
}

// parseWhen reads a time for --since and --until ("" is the zero time).
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.ParseFloat(n, 64); err == nil && days >= 0 {
			return now.Add(-time.Duration(days * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (want 2026-11-22, 2026-11-22T08:00, RFC 3339, or a duration ago like 24h or 7d)", s)
}

// when is a time in accounting tables ("-" when zero).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02T15:04:05")
}

// exitWord is an attempt's exit status ("-" when it did not exit).
func exitWord(c *int) string {
	if c == nil {
		return "-"
	}
	return strconv.Itoa(*c)
}

func newHistoryCmd(stdout, stderr io.Writer) *cobra.Command {
	var ff filterFlags
	cmd := clientCmd("history", "Finished, failed and cancelled jobs with their JCT, queueing time and every attempt (start, end, GPUs, plan, exit code, reason), like sacct", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			f, err := ff.filter(time.Now())
			if err != nil {
				return nil, nil, err
			}
			h, err := c.HistoryWhere(ctx, f)
			return h, func(w io.Writer) error { return writeHistory(w, h) }, err
		})
	ff.add(cmd, true, true)
	return cmd
}

// writeHistory prints one line per job and one per attempt (ID.N).
func writeHistory(w io.Writer, h []control.HistoryEntry) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tTENANT\tUSER\tSTATE\tSTART\tEND\tGPUS\tGPU-H\tPLAN\tEXIT\tJCT\tQUEUED\tREASON")
	for _, e := range h {
		j := e.Job
		start, exit, user := "-", "-", e.User
		if len(e.Attempts) > 0 {
			start = when(e.Attempts[0].Start)
			exit = exitWord(e.Attempts[len(e.Attempts)-1].ExitCode)
		}
		if user == "" {
			user = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t-\t%.2f\t%s\t%s\t%s\t%s\t%s\n", j.ID, clean(j.Name), clean(j.Tenant), clean(user), j.State,
			start, when(j.FinishedAt), e.GPUHours, planOf(j.Plan), exit, age(e.JCTS), age(e.QueueS), clean(j.Reason))
		for _, a := range e.Attempts {
			plan := a.Plan
			if plan == "" {
				plan = "-"
			}
			fmt.Fprintf(tw, "%s.%d\t\t\t\t%s\t%s\t%s\t%d\t%.2f\t%s\t%s\t\t\t%s\n", j.ID, a.N, a.State, when(a.Start), when(a.End), a.GPUs, a.GPUHours, plan, exitWord(a.ExitCode), clean(a.Reason))
		}
	}
	return tw.Flush()
}

func newUsageCmd(stdout, stderr io.Writer) *cobra.Command {
	var ff filterFlags
	var asCSV bool
	cmd := clientCmd("usage", "GPU-hours per tenant and user over a time range (--since, --until), like sreport", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			f, err := ff.filter(time.Now())
			if err != nil {
				return nil, nil, err
			}
			u, err := c.Usage(ctx, f)
			return u, func(w io.Writer) error {
				if asCSV {
					return writeUsageCSV(w, u)
				}
				return writeUsage(w, u)
			}, err
		})
	ff.add(cmd, false, true)
	cmd.Flags().BoolVar(&asCSV, "csv", false, "print CSV: tenant,user,gpu_hours,jobs,attempts (one line per tenant and user)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if asCSV && cmd.Flags().Changed("json") {
			return fmt.Errorf("--csv and --json: choose one")
		}
		return nil
	}
	return cmd
}

// writeUsage prints each tenant's total then its users.
func writeUsage(w io.Writer, u control.Usage) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TENANT\tUSER\tGPU-HOURS\tJOBS\tATTEMPTS")
	for _, t := range u.Tenants {
		fmt.Fprintf(tw, "%s\t(all)\t%.2f\t%d\t%d\n", clean(t.Tenant), t.GPUHours, t.Jobs, t.Attempts)
		for _, r := range u.Users {
			if r.Tenant != t.Tenant {
				continue
			}
			user := r.User
			if user == "" {
				user = "(unknown)"
			}
			fmt.Fprintf(tw, "\t%s\t%.2f\t%d\t%d\n", clean(user), r.GPUHours, r.Jobs, r.Attempts)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	since := "the first job"
	if !u.Since.IsZero() {
		since = when(u.Since)
	}
	_, err := fmt.Fprintf(w, "total %.2f GPU-hours from %s to %s\n", u.GPUHours, since, when(u.Until))
	return err
}

// writeUsageCSV prints one CSV line per tenant and user.
func writeUsageCSV(w io.Writer, u control.Usage) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"tenant", "user", "gpu_hours", "jobs", "attempts"})
	for _, r := range u.Users {
		cw.Write([]string{r.Tenant, r.User, strconv.FormatFloat(r.GPUHours, 'f', 4, 64), strconv.Itoa(r.Jobs), strconv.Itoa(r.Attempts)})
	}
	cw.Flush()
	return cw.Error()
}
