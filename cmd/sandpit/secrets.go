package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
)

func secretCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Set, list and remove secrets (values the egress proxy holds; sandboxes never see them)"}
	cmd.AddCommand(secretSetCmd(e), secretLsCmd(e), secretRmCmd(e))
	return cmd
}

// maxSecretInput bounds what secret set reads from stdin; the daemon takes
// at most 8 KiB, and reading more only to be refused helps no one.
const maxSecretInput = 64 << 10

func secretSetCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME",
		Short: "Set a secret's value, read from stdin (never from an argument, which other users' ps shows); prints its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxSecretInput))
			if err != nil {
				return fmt.Errorf("read the value from stdin: %w", err)
			}
			// One trailing line break is what `echo` and a file's last
			// line add; it is not part of the value.
			value := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if value == "" {
				return errors.New("no value on stdin: pipe it in, as in: printf %s \"$TOKEN\" | sandpit secret set NAME")
			}
			s, err := c.CreateSecret(cmd.Context(), args[0], value)
			if client.IsCode(err, apitypes.CodeNameConflict) {
				s, err = c.UpdateSecret(cmd.Context(), args[0], value)
			}
			if err != nil {
				return err
			}
			return e.emit(cmd, s, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, s.ID)
				return err
			})
		},
	}
}

func secretLsCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List secrets: names and the hosts that may receive them, never values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ss, err := c.Secrets(cmd.Context())
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ss))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tVERSION\tHOSTS\tUPDATED")
			for _, s := range ss {
				hosts := strings.Join(s.Hosts, ",")
				if hosts == "" {
					hosts = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, s.ID, s.Version, hosts, s.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
}

func secretRmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove secrets (by name or id)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "secret", c.DeleteSecret)
		},
	}
}
