package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func clusterCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect or leave the cluster the daemon belongs to"}
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
			fmt.Fprintln(tw, "NAME\tSTATE\tROLE\tAPI\tGOSSIP\tRUNNING")
			for _, m := range ms {
				role := "-"
				switch {
				case m.Leader:
					role = "leader"
				case m.Voter:
					role = "voter"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", m.Name, m.State, role, m.Meta.API, m.Gossip, m.Meta.Running)
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
