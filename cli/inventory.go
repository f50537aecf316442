package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
)

// inventoryCheckJSON is the stable --json schema of `replan inventory check`.
type inventoryCheckJSON struct {
	File     string             `json:"file"`
	OK       bool               `json:"ok"`
	Servers  int                `json:"servers"`
	Racks    int                `json:"racks"`
	Tenants  int                `json:"tenants"`
	GPUs     int                `json:"gpus"`
	Problems []*cluster.Problem `json:"problems"`
}

func newInventoryCmd(stdout, stderr io.Writer) *cobra.Command {
	inv := &cobra.Command{
		Use:   "inventory",
		Short: "Inspect and validate inventory.yaml (servers, racks, tenants, SSH)",
	}
	var asJSON bool
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate an inventory file and report every problem with file, line and field",
		Long: "Validate an inventory file (default ./inventory.yaml). Prints a one-line summary,\n" +
			"or every problem as FILE:LINE: FIELD: MESSAGE and exits non-zero.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := "inventory.yaml"
			if len(args) == 1 {
				file = args[0]
			}
			got, err := cluster.Load(file)
			problems := cluster.Problems(err)
			for _, p := range problems {
				if p.File == "" {
					p.File = file
				}
			}
			if asJSON {
				out := inventoryCheckJSON{File: file, OK: err == nil, Problems: problems}
				if out.Problems == nil {
					out.Problems = []*cluster.Problem{}
				}
				if got != nil {
					out.Servers, out.Racks, out.Tenants, out.GPUs = len(got.Servers), len(got.Racks), len(got.Tenants), got.Totals().GPUs
				}
				if jerr := writeJSON(stdout, out); jerr != nil {
					return jerr
				}
			} else if err == nil {
				fmt.Fprintf(stdout, "ok: %d servers in %d racks, %d tenants\n", len(got.Servers), len(got.Racks), len(got.Tenants))
			} else {
				for _, p := range problems {
					fmt.Fprintln(stdout, p.Error())
				}
			}
			if err != nil {
				return fmt.Errorf("inventory check: %s: %d problem(s)", file, len(problems))
			}
			return nil
		},
	}
	check.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	inv.AddCommand(check)
	return inv
}
