package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
)

// parseServerGPU reads SERVER:GPU (e.g. a800-03:5).
func parseServerGPU(arg string) (string, int, error) {
	i := strings.LastIndex(arg, ":")
	if i <= 0 || i == len(arg)-1 {
		return "", 0, fmt.Errorf("want SERVER:GPU (e.g. a800-03:5), got %q", clean(arg))
	}
	gpu, err := strconv.Atoi(arg[i+1:])
	if err != nil || gpu < 0 {
		return "", 0, fmt.Errorf("want SERVER:GPU with a GPU index 0, 1, …, got %q", clean(arg))
	}
	return arg[:i], gpu, nil
}

func newUncordonCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := clientCmd("uncordon SERVER:GPU", "Return a cordoned GPU to service (admins)", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			server, gpu, err := parseServerGPU(args[0])
			if err != nil {
				return nil, nil, err
			}
			err = c.Uncordon(ctx, server, gpu)
			return map[string]any{"server": server, "gpu": gpu}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s GPU %d back in service\n", clean(server), gpu)
				return err
			}, err
		})
	cmd.Long = "A GPU is cordoned when its agent reports an Xid that means reset or replace, a double-bit\n" +
		"ECC error, pending retired pages or row remapping, a failed row remapping, or reads that\n" +
		"keep failing (docs/control.md): it gets no new work until an admin uncordons it, typically\n" +
		"after resetting or replacing it. `replan nodes` lists cordoned GPUs with their causes."
	return cmd
}
