// Command sandpit is the one binary of Sandpit: the daemon (`serve`), the
// in-sandbox agent (`agent`) and the CLI (`create`, `ls`, `exec`, ...).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// exitError carries a process exit code out of a command (sandpit exec exits
// with the command's code).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "sandpit",
		Short:         "Self-hosted sandboxes that are safe under client retries",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var e cliEnv
	root.AddCommand(serveCmd(), uninstallCmd(), installCmd(), agentCmd(), caCmd(), versionCmd(&e))
	root.PersistentFlags().StringVar(&e.addr, "addr", "", "daemon API address for client commands (env SANDPIT_ADDR; default 127.0.0.1:7420)")
	root.PersistentFlags().StringVar(&e.tokenFile, "token-file", os.Getenv("SANDPIT_TOKEN_FILE"), "file holding the API token for client commands (env SANDPIT_TOKEN_FILE; else SANDPIT_TOKEN, else <data-dir>/token)")
	root.PersistentFlags().StringVarP(&e.output, "output", "o", envOr("SANDPIT_OUTPUT", outputText), "output format of client commands: text or json (env SANDPIT_OUTPUT)")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error { return e.validOutput() }
	root.AddCommand(clientCmds(&e)...)
	root.AddCommand(mcpCmd(&e))
	typed := typedRefs{}
	ran, err := root.ExecuteContextC(context.WithValue(ctx, typedRefsKey{}, typed))
	var ee *exitError
	var ce *cliError
	switch {
	case stateHint(ran, typed, err) != "":
		fmt.Fprintln(os.Stderr, "sandpit:", stateHint(ran, typed, err))
		os.Exit(exitCLI)
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.As(err, &ce):
		fmt.Fprintln(os.Stderr, "sandpit:", ce.msg)
		os.Exit(ce.code)
	case isDialError(err):
		// A daemon that is not running is the most common first failure; say
		// what to do, and exit with a code no sandboxed command can confuse.
		var op *net.OpError
		errors.As(err, &op)
		fmt.Fprintf(os.Stderr, "sandpit: cannot reach the daemon at %s: is 'sandpit serve' running? (%v)\n", op.Addr, op.Err)
		os.Exit(exitDaemonDown)
	case err != nil:
		fmt.Fprintln(os.Stderr, "sandpit:", describe(err))
		os.Exit(1)
	}
}

// stateHint is what to tell a user whose call needed a running sandbox and
// met a paused or stopped one: the command that fixes it, with the sandbox
// as they typed it (the command's first argument). It is "" for any other
// error.
func stateHint(ran *cobra.Command, typed typedRefs, err error) string {
	var ae *client.Error
	if !errors.As(err, &ae) || ran == nil || ran.Flags().NArg() == 0 {
		return ""
	}
	ref := ran.Flags().Arg(0)
	if t, ok := typed[ref]; ok {
		ref = t
	}
	switch ae.Code {
	case apitypes.CodeSandboxPaused:
		return fmt.Sprintf("sandbox %s is paused: run 'sandpit resume %s'", ref, ref)
	case apitypes.CodeSandboxStopped:
		return fmt.Sprintf("sandbox %s is stopped: run 'sandpit start %s'", ref, ref)
	}
	return ""
}

// isDialError reports whether err is a failure to connect to the daemon.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && op.Addr != nil
}

func versionCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.emit(cmd, map[string]string{"version": version}, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, "sandpit", version)
				return err
			})
		},
	}
}
