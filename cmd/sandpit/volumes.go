package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
)

func volumeCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "volume", Short: "Create, list and remove volumes (storage that outlives sandboxes)"}
	cmd.AddCommand(volumeCreateCmd(e), volumeLsCmd(e), volumeRmCmd(e))
	return cmd
}

func volumeCreateCmd(e *cliEnv) *cobra.Command {
	var req apitypes.CreateVolumeRequest
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume, or print the one of that name; prints its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			req.Name = args[0]
			v, err := c.CreateVolumeWith(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.emit(cmd, v, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, v.ID)
				return err
			})
		},
	}
	cmd.Flags().Var((*memoryFlag)(&req.SizeMB), "size", "most the volume may hold: MiB, or 512m, 4g (default and maximum: the daemon's --volume-size-mb)")
	return cmd
}

func volumeLsCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List volumes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			vs, err := c.Volumes(cmd.Context())
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(vs))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSTATE\tSIZE\tCREATED")
			for _, v := range vs {
				size := "unbounded"
				if v.SizeMB > 0 {
					size = strconv.FormatInt(v.SizeMB, 10) + " MiB"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Name, v.ID, v.State, size, v.CreatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
}

func volumeRmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove volumes (by name or id) and their data; a volume a sandbox mounts is refused",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "volume", c.DeleteVolume)
		},
	}
}

// volumeFlags parses --volume NAME:/path[:ro] flags.
func volumeFlags(vals []string) ([]client.VolumeMount, error) {
	var out []client.VolumeMount
	for _, v := range vals {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
			return nil, fmt.Errorf("--volume %q: want NAME:/path or NAME:/path:ro", v)
		}
		out = append(out, client.VolumeMount{Volume: parts[0], Path: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	}
	return out, nil
}
