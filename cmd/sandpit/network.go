package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
)

// networkCmd is `sandpit network`: a sandbox's egress policy and what it
// refused.
func networkCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "network", Short: "Show and change a sandbox's egress policy, and see what it refused"}
	var n client.Network
	var learn bool
	set := oneSandboxCmd(e, "set", "Replace a sandbox's egress policy (what is not given is cleared); new connections follow it at once",
		func(cmd *cobra.Command, c *client.Client, id string) error {
			if learn {
				n.Mode = "learn"
			}
			sb, err := c.UpdateNetwork(cmd.Context(), id, n)
			if err != nil {
				return err
			}
			return e.emit(cmd, sb, func(w io.Writer) error { _, err := fmt.Fprintln(w, sb.ID); return err })
		})
	f := set.Flags()
	f.StringVar(&n.Egress, "egress", "", "public (default) or none: none refuses every address and name not allowed")
	f.StringArrayVar(&n.Allow, "allow", nil, "an IPv4 CIDR or address the sandbox may reach (repeatable)")
	f.StringArrayVar(&n.Deny, "deny", nil, "an IPv4 CIDR or address the sandbox may not reach (repeatable)")
	f.StringArrayVar(&n.AllowDomains, "allow-domain", nil, "a name the sandbox may reach on ports 80 and 443, *.example.com for every name below (repeatable)")
	f.StringArrayVar(&n.DenyDomains, "deny-domain", nil, "a name the sandbox may not reach (repeatable)")
	f.StringArrayVar(&n.Profiles, "profile", nil, "a domain list the daemon defines (pypi, npm, github, ...) to allow (repeatable)")
	f.BoolVar(&learn, "learn", false, "refuse nothing by name and record the names used (see `sandpit network denied`)")
	denied := oneSandboxCmd(e, "denied", "Print the connections and DNS answers the egress proxy refused a sandbox lately, and in learn mode the names it used",
		func(cmd *cobra.Command, c *client.Client, id string) error {
			rep, err := c.NetworkDenials(cmd.Context(), id)
			if err != nil {
				return err
			}
			return e.emit(cmd, rep, func(w io.Writer) error { return printDenied(w, rep) })
		})
	cmd.AddCommand(set, denied)
	return cmd
}

// printDenied prints one line a refusal, oldest first, then the names
// learnt.
func printDenied(w io.Writer, rep client.NetworkDenied) error {
	if len(rep.Denied) == 0 && len(rep.Learned) == 0 {
		_, err := fmt.Fprintln(w, "nothing refused")
		return err
	}
	for _, d := range rep.Denied {
		if _, err := fmt.Fprintf(w, "%s  %s\n", d.Time.Local().Format("15:04:05"), d.Message); err != nil {
			return err
		}
	}
	if shown := uint64(len(rep.Denied)); rep.Total > shown {
		fmt.Fprintf(w, "(%d refused in all; the last %d shown)\n", rep.Total, shown)
	}
	if len(rep.Learned) > 0 {
		fmt.Fprintln(w, "names used (learn mode):")
		for _, n := range rep.Learned {
			fmt.Fprintln(w, "  "+n)
		}
	}
	return nil
}
