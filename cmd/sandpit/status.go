package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// nonNilSlice makes an empty list print as [] rather than null in JSON.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func statusCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's version, engine, store, pool and cluster (admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			return e.emit(cmd, st, func(w io.Writer) error {
				engine := fmt.Sprintf("%s ok (ping %.1f ms)", st.Engine.Name, st.Engine.LatencyMS)
				if !st.Engine.OK {
					engine = fmt.Sprintf("%s UNREACHABLE: %s", st.Engine.Name, st.Engine.Error)
				}
				states := make([]string, 0, len(st.Store.Sandboxes))
				for s, n := range st.Store.Sandboxes {
					states = append(states, fmt.Sprintf("%s %d", s, n))
				}
				sort.Strings(states)
				if len(states) == 0 {
					states = []string{"none"}
				}
				pool := "off"
				if st.Pool.Enabled {
					pool = fmt.Sprintf("on %v", st.Pool.Ready)
				}
				cluster := "single node"
				if st.Cluster.Enabled {
					cluster = fmt.Sprintf("%d nodes (this one %s)", st.Cluster.Nodes, st.Cluster.Node)
				}
				disk := fmt.Sprintf("%d MiB writable per sandbox (%s)", st.Disk.LimitMB, st.Disk.Mode)
				if st.Disk.Mode == "watcher" {
					disk = fmt.Sprintf("%d MiB writable per sandbox (watcher: a sandbox past it is stopped within seconds)", st.Disk.LimitMB)
				}
				if st.Disk.LimitMB == 0 {
					disk = "UNLIMITED: " + st.Disk.Warning
				}
				_, err := fmt.Fprintf(w, "version   %s (up %ds)\nrouter    %s\nengine    %s\nstore     %s: %s; writer waits %d (%.3fs)\npool      %s\ncluster   %s\ndisk      %s\n",
					st.Version, st.UptimeS, st.Router, engine, st.Store.DataDir, strings.Join(states, ", "),
					st.Store.WaitCount, st.Store.WaitSeconds, pool, cluster, disk)
				if err != nil {
					return err
				}
				names := make([]string, 0, len(st.AwaitedTemplates))
				for name := range st.AwaitedTemplates {
					names = append(names, name)
				}
				sort.Strings(names)
				for _, name := range names {
					build := ""
					if progress, ok := st.AwaitedBuilds[name]; ok {
						build = "; building (" + progress + "), a create waits for it"
					}
					if _, err := fmt.Fprintf(w, "template  %s: image %s not built yet%s; served as soon as it is\n", name, st.AwaitedTemplates[name], build); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}
