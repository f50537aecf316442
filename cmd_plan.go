package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
)

func newPlanCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{Use: "plan", Short: "Rank every feasible execution plan for a model on a GPU count",
		RunE: func(*cobra.Command, []string) error { return errors.New("plan: not yet") }}
}
