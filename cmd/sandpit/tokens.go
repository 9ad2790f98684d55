package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/client"
)

// parseExpiry parses "30d", "12h", "90m" (Go durations plus a day suffix).
func parseExpiry(s string) (time.Duration, error) {
	if s == "" || s == "0" || s == "never" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.Atoi(n)
		if err != nil || d < 1 {
			return 0, fmt.Errorf("invalid --expires %q: want a positive number of days like 30d", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("invalid --expires %q: want a duration like 30d, 12h or 90m", s)
	}
	return d, nil
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func tokenCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage personal access tokens (admin)"}
	var (
		req     client.TokenRequest
		expires string
		limits  client.Limits
	)
	create := &cobra.Command{
		Use:   "create --name NAME [--owner OWNER] [--scope SCOPE...] [--expires 30d]",
		Short: "Create a token and print it once; only its hash is kept",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseExpiry(expires)
			if err != nil {
				return err
			}
			req.ExpiresInS = int64(d / time.Second)
			if !limits.IsZero() {
				req.Limits = &limits
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			t, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.Secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %q for owner %q (scopes %s, prefix %s): store it now, it is not shown again\n",
				t.Name, t.Owner, strings.Join(t.Scopes, ","), t.Prefix)
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&req.Name, "name", "", "token name (unique among live tokens)")
	f.StringVar(&req.Owner, "owner", "", "owner of what the token makes (default: the name)")
	f.StringSliceVar(&req.Scopes, "scope", nil, "scope: admin, sandboxes:write or sandboxes:read (repeatable; default sandboxes:write)")
	f.StringVar(&expires, "expires", "", "lifetime, e.g. 30d, 12h (default: never)")
	f.Int64Var(&limits.MaxSandboxes, "max-sandboxes", 0, "owner quota: sandboxes (0: unlimited)")
	f.Float64Var(&limits.MaxCPU, "max-cpu", 0, "owner quota: total CPU cores (0: unlimited)")
	f.Int64Var(&limits.MaxMemoryMB, "max-memory", 0, "owner quota: total memory in MiB (0: unlimited)")
	f.Int64Var(&limits.MaxPorts, "max-ports", 0, "owner quota: exposed ports (0: unlimited)")
	f.Int64Var(&limits.MaxDomains, "max-domains", 0, "owner quota: custom domains (0: unlimited)")
	policyFlags(f, &limits)
	_ = create.MarkFlagRequired("name")

	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ts, err := c.ListTokens(cmd.Context(), all)
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ts))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tOWNER\tPREFIX\tSCOPES\tCREATED\tLAST USED\tEXPIRES\tREVOKED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Owner, t.Prefix, strings.Join(t.Scopes, ","),
					fmtTime(&t.CreatedAt), fmtTime(t.LastUsedAt), fmtTime(t.ExpiresAt), fmtTime(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&all, "all", false, "include revoked tokens")

	revoke := &cobra.Command{
		Use:   "revoke NAME|PREFIX",
		Short: "Revoke a token; the next request carrying it is refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			t, err := c.RevokeToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.emit(cmd, t, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, t.Name)
				return err
			})
		},
	}
	path := &cobra.Command{
		Use:   "path",
		Short: "Print the path of the token file client commands read (never the token)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := e.tokenPath()
			return e.emit(cmd, map[string]string{"path": p}, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, p)
				return err
			})
		},
	}
	cmd.AddCommand(create, list, revoke, path)
	return cmd
}

func ownerCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "owner", Short: "Show or set an owner's quotas"}
	var l client.Limits
	show := func(cmd *cobra.Command, ol client.OwnerLimits) {
		fmt.Fprintf(cmd.OutOrStdout(), "owner %s\n  sandboxes %d / %s\n  cpu       %g / %s\n  memory_mb %d / %s\n  ports     %d / %s\n  domains   %d / %s\n",
			ol.Owner, ol.Usage.Sandboxes, limitStr(float64(ol.Limits.MaxSandboxes)), ol.Usage.CPU, limitStr(ol.Limits.MaxCPU),
			ol.Usage.MemoryMB, limitStr(float64(ol.Limits.MaxMemoryMB)), ol.Usage.Ports, limitStr(float64(ol.Limits.MaxPorts)),
			ol.Usage.Domains, limitStr(float64(ol.Limits.MaxDomains)))
		l := ol.Limits
		fmt.Fprintf(cmd.OutOrStdout(), "  per sandbox: cpu default %s max %s, memory_mb default %s max %s\n  private ranges: %s\n",
			defaultStr(l.DefaultCPU), defaultStr(l.MaxSandboxCPU), defaultStr(float64(l.DefaultMemoryMB)), defaultStr(float64(l.MaxSandboxMemoryMB)),
			privateStr(l.AllowPrivateCIDRs))
	}
	set := &cobra.Command{
		Use:   "limits OWNER [--max-sandboxes N] [--max-cpu C] [--max-memory MiB] [--max-ports N] [--max-domains N] [--max-sandbox-memory MiB] [--allow-private CIDR...]",
		Short: "Show an owner's quotas and usage; with flags, change the quotas named (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			// Only the limits named on the command line change: the others
			// are read first and sent back as they are (the API's PUT
			// replaces all of them). The global flags (--addr, --token-file)
			// are no limits.
			ol, err := c.GetOwnerLimits(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			changed := false
			next := ol.Limits
			cmd.Flags().VisitAll(func(fl *pflag.Flag) {
				if set, ok := limitFields(&next, &l)[fl.Name]; ok && fl.Changed {
					set()
					changed = true
				}
			})
			if changed {
				if ol, err = c.SetOwnerLimits(cmd.Context(), args[0], next); err != nil {
					return err
				}
			}
			return e.emit(cmd, ol, func(io.Writer) error {
				show(cmd, ol)
				return nil
			})
		},
	}
	f := set.Flags()
	f.Int64Var(&l.MaxSandboxes, "max-sandboxes", 0, "sandboxes (0: unlimited)")
	f.Float64Var(&l.MaxCPU, "max-cpu", 0, "total CPU cores (0: unlimited)")
	f.Int64Var(&l.MaxMemoryMB, "max-memory", 0, "total memory in MiB (0: unlimited)")
	f.Int64Var(&l.MaxPorts, "max-ports", 0, "exposed ports (0: unlimited)")
	f.Int64Var(&l.MaxDomains, "max-domains", 0, "custom domains (0: unlimited)")
	policyFlags(f, &l)
	cmd.AddCommand(set)
	return cmd
}

// limitFields copies one flag's value from the parsed flags to the limits
// to send, by flag name.
func limitFields(dst, src *client.Limits) map[string]func() {
	return map[string]func(){
		"max-sandboxes":      func() { dst.MaxSandboxes = src.MaxSandboxes },
		"max-cpu":            func() { dst.MaxCPU = src.MaxCPU },
		"max-memory":         func() { dst.MaxMemoryMB = src.MaxMemoryMB },
		"max-ports":          func() { dst.MaxPorts = src.MaxPorts },
		"max-domains":        func() { dst.MaxDomains = src.MaxDomains },
		"default-cpu":        func() { dst.DefaultCPU = src.DefaultCPU },
		"default-memory":     func() { dst.DefaultMemoryMB = src.DefaultMemoryMB },
		"max-sandbox-cpu":    func() { dst.MaxSandboxCPU = src.MaxSandboxCPU },
		"max-sandbox-memory": func() { dst.MaxSandboxMemoryMB = src.MaxSandboxMemoryMB },
		"allow-private": func() {
			dst.AllowPrivateCIDRs = nil
			for _, c := range src.AllowPrivateCIDRs {
				if c != "" {
					dst.AllowPrivateCIDRs = append(dst.AllowPrivateCIDRs, c)
				}
			}
		},
	}
}

// policyFlags are the per-sandbox defaults and caps and the private-range
// grants of an owner, shared by token create and owner limits.
func policyFlags(f *pflag.FlagSet, l *client.Limits) {
	f.Float64Var(&l.DefaultCPU, "default-cpu", 0, "CPU cores of the owner's sandboxes that name none (0: the daemon's)")
	f.Int64Var(&l.DefaultMemoryMB, "default-memory", 0, "memory (MiB) of the owner's sandboxes that name none (0: the daemon's)")
	f.Float64Var(&l.MaxSandboxCPU, "max-sandbox-cpu", 0, "most CPU cores one sandbox of the owner may ask for (0: the daemon's)")
	f.Int64Var(&l.MaxSandboxMemoryMB, "max-sandbox-memory", 0, "most memory (MiB) one sandbox of the owner may ask for (0: the daemon's)")
	f.StringArrayVar(&l.AllowPrivateCIDRs, "allow-private", nil, "private or reserved IPv4 CIDR the owner's sandboxes may open with a network allow list (repeatable; default none; --allow-private '' removes every grant)")
}

func defaultStr(v float64) string {
	if v == 0 {
		return "daemon's"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func privateStr(c []string) string {
	if len(c) == 0 {
		return "none"
	}
	return strings.Join(c, ", ")
}

func limitStr(v float64) string {
	if v == 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func auditCmd(e *cliEnv) *cobra.Command {
	var opts client.AuditOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the audit log (admin): who did what to which resource, when, with what outcome",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			var all []client.AuditEntry
			for {
				page, next, err := c.Audit(cmd.Context(), client.AuditOptions{Owner: opts.Owner, After: opts.After, Limit: 1000})
				if err != nil {
					return err
				}
				all = append(all, page...)
				if len(page) < 1000 || next == opts.After {
					break
				}
				opts.After = next
			}
			if e.jsonOut(asJSON) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(all))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTIME\tTOKEN\tOWNER\tACTION\tRESOURCE\tOUTCOME")
			for _, a := range all {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Seq, a.At.Local().Format("2006-01-02 15:04:05"), a.TokenName, a.Owner, a.Action, a.Resource, a.Outcome)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&opts.Owner, "owner", "", "only this owner's entries")
	cmd.Flags().Int64Var(&opts.After, "after", 0, "only entries after this sequence number")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (same as --output json)")
	return cmd
}
