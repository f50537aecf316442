package main

import (
	"io"

	"github.com/spf13/cobra"
)

func newPerfCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{Use: "perf", Short: "Fit, inspect and validate the performance model"}
}
