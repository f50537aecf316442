package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
)

// newStatusCmd is `replan status`: the control plane's summary, with this
// daemon's role, the leader, the members and the leader's epoch.
func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	return clientCmd("status", "The control plane: this daemon's role, the leader, the members and the epoch; servers, GPUs, jobs and the last round", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			st, err := c.Status(ctx)
			return st, func(w io.Writer) error {
				leader := st.Leader
				if leader == "" {
					leader = "none (an election is under way, or etcd has no quorum)"
				}
				fmt.Fprintf(w, "role     %s\nleader   %s\nmembers  %s\nepoch    %d\n", clean(st.Role), clean(leader), clean(strings.Join(st.Members, ", ")), st.Epoch)
				if st.Election != "" {
					fmt.Fprintf(w, "election %s\n", clean(st.Election))
				}
				if st.Version == "" || st.Policy == "" {
					return nil // a follower without a leader knows no more
				}
				fmt.Fprintf(w, "version  %s\npolicy   %s\nservers  %d (%d GPUs, %d free, %d unusable)\njobs     %d\nround    %s ago, took %s, %d waiting\n",
					clean(st.Version), clean(st.Policy), st.Servers, st.GPUs, st.FreeGPUs, st.UnusableGPUs, st.Jobs,
					st.Now.Sub(st.LastRound.At).Round(1e6), st.LastRound.Total.Round(1e3), st.LastRound.Waiting)
				return nil
			}, err
		})
}
