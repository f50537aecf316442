package main

import (
	"io"

	"github.com/spf13/cobra"
)

func newPerfFitCmd(stdout io.Writer) *cobra.Command   { return &cobra.Command{Use: "fit"} }
func newPerfCurveCmd(stdout io.Writer) *cobra.Command { return &cobra.Command{Use: "curve"} }
func newPerfBenchCmd(stdout io.Writer) *cobra.Command { return &cobra.Command{Use: "bench"} }
