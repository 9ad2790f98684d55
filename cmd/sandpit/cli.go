package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/daemon"
)

// cliEnv holds the CLI's connection flags, shared by every client command.
type cliEnv struct {
	addr      string
	tokenFile string
	output    string // --output: text or json
}

// client connects as the flags and environment say. A token is read from a
// file (--token-file, SANDPIT_TOKEN_FILE) rather than taken on the command
// line, where every user of the machine could read it in the process list.
// tokenPath is the token file client commands read when SANDPIT_TOKEN is
// not set: --token-file, else <data-dir>/token of the daemon's default (or
// SANDPIT_DATA_DIR's) data directory, where serve writes it.
func (e *cliEnv) tokenPath() string {
	if e.tokenFile != "" {
		return e.tokenFile
	}
	return filepath.Join(envOr("SANDPIT_DATA_DIR", daemon.DefaultDataDir()), "token")
}

func (e *cliEnv) client() (*client.Client, error) {
	if e.addr != "" {
		_ = os.Setenv("SANDPIT_ADDR", e.addr)
	}
	if e.tokenFile != "" {
		tok, err := client.ReadTokenFile(e.tokenFile)
		if err != nil {
			return nil, err
		}
		addr := envOr("SANDPIT_ADDR", "127.0.0.1:7420")
		return client.New(addr, tok), nil
	}
	return client.FromEnv(daemon.DefaultDataDir())
}

func kvFlags(pairs []string, what string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s wants KEY=VALUE, got %q", what, p)
		}
		m[k] = v
	}
	return m, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func clientCmds(e *cliEnv) []*cobra.Command {
	cmds := []*cobra.Command{createCmd(e), lsCmd(e), execCmd(e), cpCmd(e), rmCmd(e), exposeCmd(e), portsCmd(e), unexposeCmd(e), domainCmd(e),
		eventsCmd(e), tokenCmd(e), auditCmd(e), ownerCmd(e), statusCmd(e), clusterCmd(e), templateCmd(e), snapshotCmd(e), forkCmd(e), volumeCmd(e), secretCmd(e), networkCmd(e), sshKeyCmd(e), sshAccessCmd(e)}
	return append(cmds, lifecycleCmds(e)...)
}

func createCmd(e *cliEnv) *cobra.Command {
	var req client.CreateRequest
	var envs, labels, volumes []string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if req.Env, err = kvFlags(envs, "--env"); err != nil {
				return err
			}
			if req.Labels, err = kvFlags(labels, "--label"); err != nil {
				return err
			}
			if req.Volumes, err = volumeFlags(volumes); err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			var spin *ticker
			stopWatch, waiting := func() {}, false
			if req.Image == "" && req.Template != "" {
				stopWatch, waiting = watchTemplateBuild(cmd.Context(), c, cmd.ErrOrStderr(), req.Template)
			}
			// A create waiting for a build prints the build's steps as
			// lines, which a spinner would write over.
			if e.interactive(cmd) && !waiting {
				spin = spinner(cmd.ErrOrStderr(), "creating sandbox")
			}
			sb, err := c.Create(cmd.Context(), req)
			if spin != nil {
				spin.Stop("")
			}
			stopWatch()
			if err != nil {
				return createHint(err, req.Name)
			}
			return e.emit(cmd, sb, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, sb.ID)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "unique name")
	f.StringVar(&req.Image, "image", "", "image (default: the daemon's default image)")
	f.StringVar(&req.Template, "template", "", "template to create from: NAME, NAME:TAG or id (sandpit template ls)")
	f.StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label KEY=VALUE (repeatable)")
	f.Float64Var(&req.CPU, "cpu", 0, "CPU cores")
	f.Var((*memoryFlag)(&req.MemoryMB), "memory", "memory limit: MiB, or with docker's units 512m, 4g")
	f.Var((*memoryFlag)(&req.DiskMB), "disk", "disk limit of what the sandbox writes outside its volumes: MiB, or 512m, 4g (default and maximum: the daemon's --disk-mb)")
	f.Int64Var(&req.TimeoutS, "timeout", 0, "seconds until the sandbox is removed (0: never)")
	f.StringArrayVar(&volumes, "volume", nil, "mount a volume: NAME:/path or NAME:/path:ro (repeatable; sandpit volume create)")
	return cmd
}

func lsCmd(e *cliEnv) *cobra.Command {
	var labels []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"ps"},
		Short:   "List sandboxes (alias ps, as docker's)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			lf, err := kvFlags(labels, "--label")
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			var all []client.Sandbox
			token := ""
			for {
				page, next, err := c.List(cmd.Context(), client.ListOptions{Labels: lf, Limit: 500, PageToken: token})
				if err != nil {
					return err
				}
				all = append(all, page...)
				if next == "" {
					break
				}
				token = next
			}
			if e.jsonOut(asJSON) {
				if all == nil {
					all = []client.Sandbox{}
				}
				return printJSON(cmd.OutOrStdout(), all)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			// TEMPLATE is what the sandbox was created from as its create
			// named it; the image (often a content hash) only when it
			// named no template.
			fmt.Fprintln(tw, "ID\tNAME\tTEMPLATE\tSTATE\tCREATED")
			for _, sb := range all {
				from := sb.Template
				if from == "" {
					from = sb.Image
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Name, from, sb.State, sb.CreatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (same as --output json)")
	return cmd
}

func execCmd(e *cliEnv) *cobra.Command {
	var envs []string
	var cwd string
	var timeout int64
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec SANDBOX -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := kvFlags(envs, "--env")
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			// Every failure before the command runs is the CLI's (exit
			// 125, 126 or 127), never a code the command could exit with.
			ref := args[0]
			sb, err := lookupSandbox(cmd.Context(), c, ref)
			if err != nil {
				if isDialError(err) {
					return err
				}
				return &cliError{exitCLI, describe(err)}
			}
			if sb.State != "running" {
				return notRunning(ref, sb)
			}
			args[0] = sb.ID
			req := client.ExecRequest{Cmd: args[1], Args: args[2:], Env: env, Cwd: cwd, TimeoutS: timeout}
			if e.jsonOut(false) {
				// One object with both streams, once the command ends;
				// through the agent protocol, which tells a program not
				// found from one not executable.
				var stdout, stderr bytes.Buffer
				code, err := c.ExecIO(cmd.Context(), args[0], req, client.ExecStreams{Stdout: &stdout, Stderr: &stderr})
				if err != nil {
					return execFailure(cmd.Context(), c, ref, sb.ID, err)
				}
				res := client.ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String()}
				if err := printJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
				if res.ExitCode != 0 {
					return &exitError{res.ExitCode}
				}
				return nil
			}
			streams, restore, err := execStreams(cmd, interactive, tty)
			if err != nil {
				return err
			}
			code, err := c.ExecIO(cmd.Context(), args[0], req, streams)
			restore()
			if err != nil {
				return execFailure(cmd.Context(), c, ref, sb.ID, err)
			}
			if code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command even when it is a terminal (piped input always passes)")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command under a terminal (with -i: an interactive shell)")
	cmd.Flags().StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory")
	cmd.Flags().Int64Var(&timeout, "timeout", 0, "seconds before the command is killed (0: none)")
	return cmd
}

// splitRemote parses "ID:/path"; a local path has no "ID:" prefix.
func splitRemote(s string) (id, path string, remote bool) {
	id, path, ok := strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/") {
		return "", s, false
	}
	return id, path, true
}

// emitCopy reports a finished copy: nothing in text (like cp), an object in
// JSON.
func (e *cliEnv) emitCopy(cmd *cobra.Command, args []string, n int64) error {
	if !e.jsonOut(false) {
		return nil
	}
	return printJSON(cmd.OutOrStdout(), map[string]any{"source": args[0], "destination": args[1], "bytes": n})
}

// thresholdWriter counts a download and starts its progress bar once it
// passes progressThreshold.
type thresholdWriter struct {
	p       *transfer
	start   func()
	started bool
}

func (t *thresholdWriter) Write(b []byte) (int, error) {
	n, _ := t.p.Write(b)
	if !t.started {
		if cur, _ := t.p.get(); cur >= progressThreshold {
			t.started = true
			t.start()
		}
	}
	return n, nil
}

func doneLine(verb string, p *transfer) string {
	n, _ := p.get()
	return verb + " " + humanBytes(n)
}

func cpCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox (either side ID:/path; - is stdin/stdout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, spath, sremote := splitRemote(args[0])
			did, dpath, dremote := splitRemote(args[1])
			if sremote == dremote {
				return fmt.Errorf("exactly one of SRC and DST must be ID:/path")
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			ref := &sid
			if dremote {
				ref = &did
			}
			if *ref, err = resolveSandbox(cmd.Context(), c, *ref); err != nil {
				return err
			}
			if dremote {
				var data []byte
				if spath == "-" {
					data, err = io.ReadAll(cmd.InOrStdin())
				} else {
					data, err = os.ReadFile(spath)
				}
				if err != nil {
					return err
				}
				var bar *ticker
				p := &transfer{total: int64(len(data))}
				if len(data) >= progressThreshold && e.interactive(cmd) {
					bar = progressBar(cmd.ErrOrStderr(), "upload", p)
				}
				err = c.WriteFileProgress(cmd.Context(), did, dpath, data, p.set)
				if bar != nil {
					bar.Stop(doneLine("uploaded", p))
				}
				if err != nil {
					return err
				}
				return e.emitCopy(cmd, args, int64(len(data)))
			}
			var buf bytes.Buffer
			// The size is not known before the copy; the bar shows bytes
			// and rate, and appears only once a copy proves large.
			p := &transfer{}
			var bar *ticker
			sink := io.Writer(&buf)
			if dpath != "-" && e.interactive(cmd) {
				sink = io.MultiWriter(&buf, &thresholdWriter{p: p, start: func() { bar = progressBar(cmd.ErrOrStderr(), "download", p) }})
			}
			err = c.ReadFile(cmd.Context(), sid, spath, sink)
			if bar != nil {
				bar.Stop(doneLine("downloaded", p))
			}
			if err != nil {
				return err
			}
			if dpath == "-" {
				_, err = cmd.OutOrStdout().Write(buf.Bytes())
				return err
			}
			if err := os.WriteFile(dpath, buf.Bytes(), 0o644); err != nil {
				return err
			}
			return e.emitCopy(cmd, args, int64(buf.Len()))
		},
	}
}

func rmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "id", func(ctx context.Context, ref string) error {
				id, err := resolveSandbox(ctx, c, ref)
				if err != nil {
					return err
				}
				return c.Delete(ctx, id)
			})
		},
	}
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return p, nil
}

func exposeCmd(e *cliEnv) *cobra.Command {
	var tcp bool
	cmd := &cobra.Command{
		Use:   "expose ID PORT",
		Short: "Expose a sandbox port and print its public URL",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := parsePort(args[1])
			if err != nil {
				return err
			}
			proto := "http"
			if tcp {
				proto = "tcp"
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			p, err := c.ExposePort(cmd.Context(), args[0], port, proto)
			if err != nil {
				return err
			}
			return e.emit(cmd, p, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, p.PublicURL)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&tcp, "tcp", false, "raw TCP through a host port instead of an HTTP preview URL")
	return cmd
}

func portsCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "ports ID",
		Short: "List a sandbox's exposed ports",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			ports, err := c.ListPorts(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ports))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PORT\tPROTOCOL\tHOST PORT\tURL")
			for _, p := range ports {
				// An HTTP exposure goes through the router and has no host
				// port of its own: show a dash, not 0; the URL says where it is.
				host := "-"
				if p.HostPort != 0 {
					host = strconv.Itoa(p.HostPort)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.Port, p.Protocol, host, p.PublicURL)
			}
			return tw.Flush()
		},
	}
}

func unexposeCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "unexpose ID PORT",
		Short: "Remove a port exposure",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := parsePort(args[1])
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			if err := c.UnexposePort(cmd.Context(), args[0], port); err != nil {
				return err
			}
			return e.emit(cmd, map[string]any{"id": args[0], "port": port, "exposed": false}, func(io.Writer) error { return nil })
		},
	}
}

func domainCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "domain", Short: "Manage custom hostnames of a sandbox"}
	cmd.AddCommand(&cobra.Command{
		Use:   "add ID HOSTNAME PORT",
		Short: "Route HOSTNAME to a sandbox port",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := parsePort(args[2])
			if err != nil {
				return err
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			d, err := c.AddDomain(cmd.Context(), args[0], args[1], port)
			if err != nil {
				return err
			}
			return e.emit(cmd, d, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, d.URL)
				return err
			})
		},
	}, &cobra.Command{
		Use:   "rm ID HOSTNAME",
		Short: "Unbind a hostname",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			if err := c.RemoveDomain(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			return e.emit(cmd, map[string]any{"id": args[0], "hostname": args[1], "bound": false}, func(io.Writer) error { return nil })
		},
	}, &cobra.Command{
		Use:   "ls ID",
		Short: "List a sandbox's hostnames",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			ds, err := c.ListDomains(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ds))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HOSTNAME\tPORT\tURL")
			for _, d := range ds {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", d.Hostname, d.Port, d.URL)
			}
			return tw.Flush()
		},
	})
	return cmd
}

func eventsCmd(env *cliEnv) *cobra.Command {
	e := env
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow sandbox state changes and template builds as they happen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			err = c.Events(cmd.Context(), func(e client.Event) error {
				if env.jsonOut(asJSON) {
					b, err := json.Marshal(e)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(out, "%s\n", b)
					return err
				}
				if e.BuildID != "" {
					// A template build's change: no sandbox, the build's state.
					line := fmt.Sprintf("%s  %-8s %s %s  %s", e.Time.Format("2006-01-02 15:04:05.000"), e.Type, e.Template, e.BuildID, e.State)
					if e.Error != "" {
						line += ": " + e.Error
					}
					_, err := fmt.Fprintln(out, line)
					return err
				}
				state := e.State
				if state == "" {
					state = "-"
				}
				_, err := fmt.Fprintf(out, "%s  %-8s %s  %s -> %s\n", e.Time.Format("2006-01-02 15:04:05.000"), e.Type, e.SandboxID, e.OldState, state)
				return err
			})
			if errors.Is(err, io.EOF) {
				return nil // the daemon shut down
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line")
	return cmd
}

// removeEach removes every ref with del, printing each one removed (or, with
// --output json, a row per ref under key) and each failure; one failure
// makes the command exit 1 after the others were tried.
func removeEach(cmd *cobra.Command, e *cliEnv, refs []string, key string, del func(context.Context, string) error) error {
	results := make([]map[string]any, 0, len(refs))
	failed := false
	for _, ref := range refs {
		row := map[string]any{key: ref, "removed": true}
		if err := del(cmd.Context(), ref); err != nil {
			if isDialError(err) {
				// Every other ref would fail the same way: report the daemon
				// once, with its hint and exit code.
				return err
			}
			row["removed"], row["error"] = false, describe(err)
			if !e.jsonOut(false) {
				fmt.Fprintln(cmd.ErrOrStderr(), "sandpit:", describe(err))
			}
			failed = true
		} else if !e.jsonOut(false) {
			fmt.Fprintln(cmd.OutOrStdout(), ref)
		}
		results = append(results, row)
	}
	if e.jsonOut(false) {
		if err := printJSON(cmd.OutOrStdout(), results); err != nil {
			return err
		}
	}
	if failed {
		return &exitError{1}
	}
	return nil
}
