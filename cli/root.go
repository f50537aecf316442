package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X github.com/replan/replan/cli.version=...".
var version = "dev"

// newRootCmd wires every subcommand. Each subcommand lives in its own
// file of cli/ and is constructed here; commands hold no scheduling logic.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "replan",
		Short:         "Plan-aware, network-aware scheduler for bare-metal GPU training clusters",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("remote", "", "[user@]head[:port]: reach the daemon's socket on the head node over SSH (host key checked against replan's known_hosts); the daemon sees the user sshd authenticated")
	for _, add := range []func(io.Writer, io.Writer) *cobra.Command{
		newPlanCmd,
		newPerfCmd,
		newLaunchCmd,
		newDemoCmd,
		newTUICmd,
		newDaemonCmd,
		newSubmitCmd,
		newWhoamiCmd,
		newQueueCmd,
		newJobsCmd,
		newJobCmd,
		newJobOpCmd("cancel", "Cancel a job (a running one is stopped)"),
		newJobOpCmd("hold", "Keep a waiting job out of scheduling"),
		newJobOpCmd("release", "Return a held job to the queue"),
		newDrainCmd,
		newNodeOpCmd("undrain", "Let the scheduler use a drained server again"),
		newUncordonCmd,
		newHistoryCmd,
		newUsageCmd,
		newEventsCmd,
		newLogsCmd,
		newLinksCmd,
		newInventoryCmd,
		newTrustCmd,
		newAgentCmd,
		newSimCmd,
		newDeployCmd,
		newNodesCmd,
		newModelsCmd,  // models.go
		newProfileCmd, // models.go
		newStatusCmd,  // status.go
		newStoreCmd,   // store.go
	} {
		root.AddCommand(add(stdout, stderr))
	}
	return root
}
