package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func clusterCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect, drain or leave the cluster the daemon belongs to"}
	drain := func(use, short string, on bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NODE",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := e.client()
				if err != nil {
					return err
				}
				if err := c.ClusterDrain(cmd.Context(), args[0], on); err != nil {
					return err
				}
				state := "takes new sandboxes"
				if on {
					state = "takes no new sandboxes; its sandboxes keep running"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", args[0], state)
				return nil
			},
		}
	}
	cmd.AddCommand(
		drain("drain", "Stop placing new sandboxes on a node (admin)", true),
		drain("undrain", "Place new sandboxes on a drained node again (admin)", false),
	)
	cmd.AddCommand(&cobra.Command{
		Use:   "members",
		Short: "List the cluster's members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ms, err := c.ClusterMembers(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tROLE\tAPI\tGOSSIP\tRUNNING\tPLACED\tMAX\tDRAIN")
			for _, m := range ms {
				role := "-"
				switch {
				case m.Leader:
					role = "leader"
				case m.Voter:
					role = "voter"
				}
				limit, drain := "-", "-"
				if m.MaxSandboxes > 0 {
					limit = fmt.Sprint(m.MaxSandboxes)
				}
				if m.Draining {
					drain = "draining"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Name, m.State, role, m.Meta.API, m.Gossip, m.Meta.Running, m.Placements, limit, drain)
			}
			return tw.Flush()
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "Show the node's Raft state and index digest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			st, err := c.ClusterStatus(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), st)
		},
	}, &cobra.Command{
		Use:   "leave",
		Short: "Make the node leave the cluster and stop",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return c.ClusterLeave(cmd.Context())
		},
	})
	return cmd
}
