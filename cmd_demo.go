package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
)

func newDemoCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run replan against a simulated 64-GPU A800 cluster (not yet built)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("demo: not yet: the simulated cluster and TUI arrive with the scheduler, simulator and TUI issues; try `replan plan --model gpt2 --gpus 8` or `replan perf validate --data ../shared/data/morphling`")
		},
	}
}
