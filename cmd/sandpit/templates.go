package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
)

func templateCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build, list and remove templates (images sandboxes are created from)"}
	cmd.AddCommand(templateBuildCmd(e), templateLsCmd(e), templateRmCmd(e))
	return cmd
}

// buildFailed is a build that ended in error: its message is the engine's
// (or the daemon's) reason, printed as the command's error.
type buildFailed struct {
	name, reason string
}

func (b *buildFailed) Error() string {
	return fmt.Sprintf("build of template %s failed: %s", b.name, b.reason)
}

func templateBuildCmd(e *cliEnv) *cobra.Command {
	var req client.BuildTemplateRequest
	var dockerfile string
	var detach bool
	cmd := &cobra.Command{
		Use:   "build [flags] DIR",
		Short: "Build a template from DIR (the build context) and its Dockerfile, following the build's log",
		Long: "Build a template from DIR (the build context) and its Dockerfile, following the build's log.\n" +
			"DIR is archived (symlinks kept as links, .dockerignore honoured) and uploaded; a rebuild of\n" +
			"an unchanged definition reuses the earlier image unless --no-cache is given.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if st, err := os.Stat(dir); err != nil {
				return err
			} else if !st.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			if dockerfile == "" {
				dockerfile = filepath.Join(dir, "Dockerfile")
			}
			df, err := os.ReadFile(dockerfile)
			if err != nil {
				return err
			}
			req.Dockerfile = string(df)
			if req.Name == "" {
				abs, err := filepath.Abs(dir)
				if err != nil {
					return err
				}
				req.Name = strings.ToLower(filepath.Base(abs))
			}
			archive, err := client.TarContext(dir)
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if req.Context, err = c.UploadTemplateFiles(ctx, archive); err != nil {
				return err
			}
			res, err := c.BuildTemplate(ctx, req)
			if err != nil {
				return err
			}
			if detach {
				return e.emit(cmd, res, func(w io.Writer) error {
					_, err := fmt.Fprintln(w, res.Build.ID)
					return err
				})
			}
			logs := cmd.ErrOrStderr()
			if e.jsonOut(false) {
				logs = io.Discard // stdout is the one JSON object; stderr stays quiet for scripts
			}
			b, err := c.WaitBuild(ctx, res.Template.ID, res.Build.ID, func(l client.BuildLogEntry) error {
				if l.Level == "error" {
					return nil // the build's reason: the command's error says it, once
				}
				_, err := fmt.Fprintln(logs, strings.TrimRight(l.Message, "\n"))
				return err
			})
			if err != nil {
				return err
			}
			if b.State != "ready" {
				return &buildFailed{name: req.Name, reason: b.Error}
			}
			t, err := c.GetTemplate(ctx, res.Template.ID)
			if err != nil {
				return err
			}
			return e.emit(cmd, t, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, t.Name)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&dockerfile, "file", "f", "", "the Dockerfile (default DIR/Dockerfile)")
	f.StringVar(&req.Name, "name", "", "the template's name (default: DIR's base name)")
	f.StringArrayVarP(&req.Tags, "tag", "t", nil, "tag the build (repeatable); the template is then also name:TAG")
	f.StringVar(&req.StartCmd, "start-cmd", "", "command started, detached, in every sandbox created from the template")
	f.StringVar(&req.ReadyCmd, "ready-cmd", "", "command polled until it exits 0 before a create from the template answers")
	f.StringVar(&req.User, "user", "", "the user sandboxes of the template run as")
	f.StringVar(&req.Workdir, "workdir", "", "the working directory of the template's sandboxes")
	f.Float64Var(&req.CPU, "cpu", 0, "default CPU cores of the template's sandboxes")
	f.Var((*memoryFlag)(&req.MemoryMB), "memory", "default memory limit of the template's sandboxes: MiB, or 512m, 4g")
	f.BoolVar(&req.NoCache, "no-cache", false, "build anew: no reuse of an earlier build of the same definition, no layer cache")
	f.BoolVarP(&detach, "detach", "d", false, "start the build and print its id without following it")
	return cmd
}

func templateLsCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List templates with their state and newest build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ts, err := c.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ts))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSTATE\tBUILD\tIMAGE\tUPDATED")
			for _, t := range ts {
				state, build := "-", "-"
				if t.Build != nil {
					state, build = t.Build.State, t.Build.ID
					if t.Build.QueuePosition > 0 {
						state = fmt.Sprintf("queued (%d)", t.Build.QueuePosition)
					}
				}
				name := t.Name
				if name == "" {
					name = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, t.ID, state, build, t.Image, t.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
}

func templateRmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove templates (by name or id) and their images",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "template", c.DeleteTemplate)
		},
	}
}
