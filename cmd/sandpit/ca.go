package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/daemon"
)

// caCmd prints the internal CA's certificate (serve --tls internal), for a
// client to trust: it reads the daemon's data directory, so it runs on the
// daemon's machine, as a user who may read that directory.
func caCmd() *cobra.Command {
	var dataDir string
	var path bool
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print the certificate of the internal CA (serve --tls internal) that preview hosts' certificates chain to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := daemon.CACertPath(dataDir)
			if path {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), p)
				return err
			}
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("no internal CA at %s: it is created by the first `sandpit serve --tls internal --data-dir %s`", p, dataDir)
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", envOr("SANDPIT_DATA_DIR", daemon.DefaultDataDir()), "the daemon's data directory (env SANDPIT_DATA_DIR)")
	cmd.Flags().BoolVar(&path, "path", false, "print the certificate file's path instead of its contents")
	return cmd
}
