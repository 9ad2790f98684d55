package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
)

func snapshotCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Snapshot sandboxes' filesystems, list and remove snapshots"}
	cmd.AddCommand(snapshotCreateCmd(e), snapshotLsCmd(e), snapshotRmCmd(e))
	return cmd
}

func snapshotCreateCmd(e *cliEnv) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create SANDBOX",
		Short: "Snapshot a sandbox's filesystem; `sandpit create --template` makes sandboxes from it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			t, err := c.Snapshot(cmd.Context(), args[0], client.SnapshotRequest{Name: name})
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name the snapshot (a new build of it when it exists)")
	return cmd
}

func snapshotLsCmd(e *cliEnv) *cobra.Command {
	var sandbox, name string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ss, err := c.ListSnapshots(cmd.Context(), sandbox, name)
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ss))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSANDBOX\tIMAGE\tUPDATED")
			for _, s := range ss {
				n := s.Name
				if n == "" {
					n = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n, s.ID, s.SourceSandbox, s.Image, s.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only the snapshots of this sandbox")
	cmd.Flags().StringVar(&name, "name", "", "only the snapshots of this name")
	return cmd
}

func snapshotRmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots (by name or id); refused while a sandbox runs from one",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "snapshot", c.DeleteSnapshot)
		},
	}
}

func forkCmd(e *cliEnv) *cobra.Command {
	var (
		count, timeout int
		name           string
	)
	cmd := &cobra.Command{
		Use:   "fork SANDBOX",
		Short: "Copy a sandbox: snapshot it once and make --count sandboxes from the snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count must be at least 1, got %d", count)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			forks, err := c.Fork(cmd.Context(), args[0], client.ForkRequest{Count: count, TimeoutS: timeout, Name: name})
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), forks)
			}
			failed := false
			for _, f := range forks {
				if f.Error != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "sandpit: a copy failed:", f.Error.Message)
					failed = true
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), f.Sandbox.ID)
			}
			if failed {
				return &exitError{1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 1, "how many copies")
	f.IntVar(&timeout, "timeout", 0, "each copy's time to live in seconds (0 = the parent's remaining time)")
	f.StringVar(&name, "name", "", "name the copy (with --count 1)")
	return cmd
}
