package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

// unitTemplate is the systemd unit `sandpit install` writes. The daemon
// logs to stderr, which systemd sends to the journal (journalctl -u
// sandpit); it stops on SIGTERM, draining requests first; the engine comes
// first when it is a unit of its own.
const unitTemplate = `[Unit]
Description=Sandpit sandbox daemon
Documentation=https://github.com/sandpit-dev/sandpit
After=network-online.target docker.service
Wants=network-online.target docker.service

[Service]
Type=exec
ExecStart={{.Binary}} serve --config {{.Config}}
Restart=on-failure
RestartSec=2
KillSignal=SIGTERM
TimeoutStopSec=60
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`

// configTemplate is the configuration file `sandpit install` writes when
// there is none: every key is a flag of serve, and the commented ones are
// the defaults.
const configTemplate = `# sandpit serve's configuration: each key is one of its flags
# (sandpit serve --help lists them all); flags and SANDPIT_* environment
# variables given to serve override what is here.
#
# listen: 127.0.0.1:7420
# proxy-listen: 127.0.0.1:7480
# data-dir: /var/lib/sandpit
# domain: localhost
# tls: off
# warm-pool: ["base=2"]
`

func installCmd() *cobra.Command {
	var (
		dryRun               bool
		binary, config, unit string
		enable               bool
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install serve as a systemd service: write its unit (and a config file if none), enable and start it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if binary == "" {
				var err error
				if binary, err = installedBinary(cmd); err != nil {
					return err
				}
			}
			abs, err := filepath.Abs(binary)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(config) {
				return fmt.Errorf("--config must be an absolute path, got %q", config)
			}
			var b bytes.Buffer
			if err := template.Must(template.New("unit").Parse(unitTemplate)).Execute(&b, map[string]string{"Binary": abs, "Config": config}); err != nil {
				return err
			}
			if dryRun {
				_, err := cmd.OutOrStdout().Write(b.Bytes())
				return err
			}
			if _, err := os.Stat(config); os.IsNotExist(err) {
				if err := os.MkdirAll(filepath.Dir(config), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(config, []byte(configTemplate), 0o644); err != nil {
					return err
				}
				fmt.Fprintln(cmd.ErrOrStderr(), "wrote", config)
			}
			if err := os.WriteFile(unit, b.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "wrote", unit)
			if !enable {
				return nil
			}
			name := strings.TrimSuffix(filepath.Base(unit), ".service")
			for _, args := range [][]string{{"daemon-reload"}, {"enable", "--now", name}} {
				out, err := exec.CommandContext(cmd.Context(), "systemctl", args...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, out)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "started %s: journalctl -u %s for its log, systemctl stop|restart %s\n", name, name, name)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "print the unit and change nothing")
	f.StringVar(&binary, "binary", "", "the sandpit binary the unit runs (default: this one)")
	f.StringVar(&config, "config", defaultConfigFile, "configuration file the service reads (written with commented defaults if missing)")
	f.StringVar(&unit, "unit", "/etc/systemd/system/sandpit.service", "where the unit is written")
	f.BoolVar(&enable, "enable", true, "enable and start the service once its unit is written")
	return cmd
}

// installedBinary is the sandpit the unit runs by default: the one on PATH,
// where the README's set-up installs it, rather than this executable, which
// may be bin/sandpit of a checkout that the next build replaces under the
// running service. Without one on PATH it is this executable, with a note.
func installedBinary(cmd *cobra.Command) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary (give --binary): %w", err)
	}
	onPath, err := exec.LookPath("sandpit")
	if err == nil {
		if abs, aerr := filepath.Abs(onPath); aerr == nil {
			if abs != exe {
				fmt.Fprintf(cmd.ErrOrStderr(), "the unit runs %s, the sandpit on PATH (--binary chooses another)\n", abs)
			}
			return abs, nil
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "no sandpit on PATH: the unit runs %s; install it first (install -m 0755 %s /usr/local/bin/sandpit) so that a rebuild does not change the service under it\n", exe, exe)
	return exe, nil
}
