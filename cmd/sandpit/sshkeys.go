package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func sshKeyCmd(e *cliEnv) *cobra.Command {
	cmd := &cobra.Command{Use: "ssh-key", Short: "Register, list and remove the public keys that may SSH into your sandboxes (serve --ssh-listen)"}
	cmd.AddCommand(sshKeyAddCmd(e), sshKeyLsCmd(e), sshKeyRmCmd(e))
	return cmd
}

func sshKeyAddCmd(e *cliEnv) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "add FILE.pub|-",
		Short: "Register a public key (a .pub file, or - for stdin) as yours; prints its fingerprint",
		Long: "Register a public key for SSH into your sandboxes (ssh -p PORT SANDBOX@HOST). " +
			"Adding a key that is registered already prints it again; a key another owner registered is refused.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				b   []byte
				err error
			)
			if args[0] == "-" {
				b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
			} else {
				b, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			line := strings.TrimSpace(string(b))
			if line == "" {
				return errors.New("no public key in " + args[0])
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			k, err := c.AddSSHKey(cmd.Context(), name, line)
			if err != nil {
				return err
			}
			return e.emit(cmd, k, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, k.Fingerprint)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the key's name (default: its comment)")
	return cmd
}

func sshKeyLsCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List your registered SSH keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			ks, err := c.SSHKeys(cmd.Context())
			if err != nil {
				return err
			}
			if e.jsonOut(false) {
				return printJSON(cmd.OutOrStdout(), nonNilSlice(ks))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFINGERPRINT\tTYPE\tOWNER\tCREATED\tLAST USED")
			for _, k := range ks {
				used := "never"
				if k.LastUsedAt != nil {
					used = k.LastUsedAt.Format("2006-01-02 15:04:05")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, k.Fingerprint, k.Type, k.Owner, k.CreatedAt.Format("2006-01-02 15:04:05"), used)
			}
			return tw.Flush()
		},
	}
}

func sshKeyRmCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "rm FINGERPRINT|NAME...",
		Short: "Remove SSH keys; the sessions logged in with them end",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return removeEach(cmd, e, args, "key", c.DeleteSSHKey)
		},
	}
}

func sshAccessCmd(e *cliEnv) *cobra.Command {
	var (
		minutes int
		revoke  bool
	)
	cmd := &cobra.Command{
		Use:   "ssh-access SANDBOX",
		Short: "Print a short-lived SSH token for a sandbox (ssh -p PORT TOKEN@HOST), or --revoke them all",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if err := resolveArg(cmd.Context(), c, args, 0); err != nil {
				return err
			}
			if revoke {
				return c.RevokeSSHAccess(cmd.Context(), args[0])
			}
			a, err := c.CreateSSHAccess(cmd.Context(), args[0], minutes)
			if err != nil {
				return err
			}
			return e.emit(cmd, a, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, a.Token)
				return err
			})
		},
	}
	cmd.Flags().IntVar(&minutes, "minutes", 60, "how long the token admits logins (at most 1440)")
	cmd.Flags().BoolVar(&revoke, "revoke", false, "remove every SSH token of the sandbox instead, ending their sessions")
	return cmd
}
