package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// lifecycleCmds are start, stop, pause, resume, update, inspect, stats and logs: each takes
// sandboxes by id, name or id prefix, as docker's commands take containers.
func lifecycleCmds(e *cliEnv) []*cobra.Command {
	var pauseMode string
	change := func(use, short string, do func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " SANDBOX...",
			Short: short,
			Args:  cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := e.client()
				if err != nil {
					return err
				}
				return eachSandbox(cmd, e, c, args, do)
			},
		}
	}
	pause := change("pause", "Pause sandboxes (--mode memory freezes them, filesystem stops them and keeps their files)",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.Pause(ctx, id, pauseMode)
		})
	pause.Flags().StringVar(&pauseMode, "mode", "", "memory (default) or filesystem")
	one := func(use, short string, do func(cmd *cobra.Command, c *client.Client, id string) error) *cobra.Command {
		return oneSandboxCmd(e, use, short, do)
	}
	inspect := one("inspect", "Print a sandbox as JSON", func(cmd *cobra.Command, c *client.Client, id string) error {
		sb, err := c.Get(cmd.Context(), id)
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), sb)
	})
	stats := one("stats", "Print one sample of a running sandbox's CPU, memory and disk use", func(cmd *cobra.Command, c *client.Client, id string) error {
		st, err := c.Stats(cmd.Context(), id)
		if err != nil {
			return err
		}
		// The sample counts whole CPUs; the sandbox's own limit (0.5 CPU)
		// is what its percentage is of.
		share := float64(st.CPUCount)
		if sb, err := c.Get(cmd.Context(), id); err == nil && sb.CPU > 0 {
			share = sb.CPU
		}
		return e.emit(cmd, st, func(w io.Writer) error { return printStats(w, st, share) })
	})
	var follow bool
	logs := one("logs", "Print the output of the sandbox's start command (-f: and follow it)", func(cmd *cobra.Command, c *client.Client, id string) error {
		tail := "tail -n +1"
		if follow {
			tail += " -f"
		}
		// The start command's output goes to one file in the sandbox
		// (service.startTemplate); a sandbox without one has no log.
		script := `[ -e "$0" ] || { echo "sandbox has no start command, so nothing logs: logs shows the output of a template's start command" >&2; exit 3; }; exec ` + tail + ` "$0"`
		ctx := cmd.Context()
		var gone <-chan string
		if follow {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			gone = watchGone(ctx, c, id, cancel)
		}
		code, err := c.ExecIO(ctx, id, client.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", script, agentapi.StartLogPath}},
			client.ExecStreams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()})
		if follow {
			// Following ends with the sandbox, as docker logs -f ends
			// with its container: whether the watcher saw it go first or
			// the stream broke off as it went.
			why, ok := "", false
			select {
			case why, ok = <-gone:
			default:
				if err != nil {
					why, ok = sandboxGone(cmd.Context(), c, id)
				}
			}
			if ok {
				fmt.Fprintf(cmd.ErrOrStderr(), "sandpit: sandbox %s %s\n", cmd.Flags().Arg(0), why)
				return nil
			}
		}
		if err != nil {
			return execFailure(cmd.Context(), c, cmd.Flags().Arg(0), id, err)
		}
		if code != 0 {
			return &exitError{1}
		}
		return nil
	})
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the start command writes, until interrupted")
	var res client.Resources
	update := change("update", "Change sandboxes' cpu and memory limits, at once and for later starts (like docker update)",
		func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.Resize(ctx, id, res)
		})
	update.Flags().Float64Var(&res.CPU, "cpu", 0, "cpu limit in cores (unchanged when not given)")
	update.Flags().Var((*memoryFlag)(&res.MemoryMB), "memory", "memory limit: MiB, or with docker's units 512m, 4g (unchanged when not given)")
	return []*cobra.Command{
		update,
		change("start", "Start stopped sandboxes", func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.Start(ctx, id)
		}),
		change("stop", "Stop sandboxes (their files are kept; start brings them back)", func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) { return c.Stop(ctx, id) }),
		pause,
		change("resume", "Resume paused sandboxes", func(ctx context.Context, c *client.Client, id string) (client.Sandbox, error) {
			return c.Resume(ctx, id)
		}),
		inspect,
		stats,
		logs,
	}
}

// watchGone polls the sandbox until it stops running or is removed, then
// says which on the channel it returns and calls cancel. A removed
// container's connections are not always reset (its network goes with
// it), so a follower cannot count on its stream ending by itself.
func watchGone(ctx context.Context, c *client.Client, id string, cancel context.CancelFunc) <-chan string {
	gone := make(chan string, 1)
	go func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if why, ok := sandboxGone(ctx, c, id); ok {
				gone <- why
				cancel()
				return
			}
		}
	}()
	return gone
}

// sandboxGone says whether the sandbox was removed or no longer runs, and
// which.
func sandboxGone(ctx context.Context, c *client.Client, id string) (string, bool) {
	sb, err := c.Get(ctx, id)
	switch {
	case isNotFound(err), err == nil && sb.State == "deleting":
		return "was removed", true
	case err == nil && sb.State != "running":
		return "is " + sb.State, true
	}
	return "", false
}

// oneSandboxCmd is a command of one sandbox: it resolves the reference (an
// id, a name or an id prefix) and runs do.
func oneSandboxCmd(e *cliEnv, use, short string, do func(cmd *cobra.Command, c *client.Client, id string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " SANDBOX",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			id, err := resolveSandbox(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			return do(cmd, c, id)
		},
	}
}

// printStats prints a sample with its units: a limit of 0 is the engine's
// "none", which says more as words than as "0 B".
func printStats(w io.Writer, st client.Stats, cpuShare float64) error {
	limit := func(used, total int64) string {
		if total <= 0 {
			return humanBytes(used) + " (no limit)"
		}
		return fmt.Sprintf("%s of %s (%.0f%%)", humanBytes(used), humanBytes(total), 100*float64(used)/float64(total))
	}
	cpus := "CPUs"
	if cpuShare <= 1 {
		cpus = "CPU"
	}
	_, err := fmt.Fprintf(w, "CPU     %.1f%% of %s %s\nMEMORY  %s\nDISK    %s\n",
		st.CPUUsedPercent, strconv.FormatFloat(cpuShare, 'f', -1, 64), cpus, limit(st.MemoryUsedBytes, st.MemoryLimitBytes), limit(st.DiskUsedBytes, st.DiskLimitBytes))
	return err
}

// eachSandbox applies do to every sandbox named in refs, printing each id
// (or, with --output json, the sandboxes) and reporting every failure;
// exit 1 when any failed, as docker's commands of several containers do.
func eachSandbox(cmd *cobra.Command, e *cliEnv, c *client.Client, refs []string, do func(context.Context, *client.Client, string) (client.Sandbox, error)) error {
	var out []client.Sandbox
	failed := false
	for _, ref := range refs {
		id, err := resolveSandbox(cmd.Context(), c, ref)
		var sb client.Sandbox
		if err == nil {
			sb, err = do(cmd.Context(), c, id)
		}
		if err != nil {
			if isDialError(err) {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "sandpit:", describe(err))
			failed = true
			continue
		}
		out = append(out, sb)
		if !e.jsonOut(false) {
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
		}
	}
	if e.jsonOut(false) {
		if out == nil {
			out = []client.Sandbox{}
		}
		if err := printJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	}
	if failed {
		return &exitError{1}
	}
	return nil
}
