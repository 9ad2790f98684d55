package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/daemon"
)

// envOr returns the environment variable's value, or def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func serveCmd() *cobra.Command {
	var (
		cfg                                    daemon.Config
		portRange, logLevel                    string
		templates, labels                      []string
		e2bPending, e2bReplay, idemWait, idemR time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: API, store, runtime, router and facades",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pr, err := daemon.ParsePortRange(portRange)
			if err != nil {
				return err
			}
			cfg.PortRange = pr
			cfg.Templates = map[string]string{}
			for _, t := range templates {
				name, image, ok := strings.Cut(t, "=")
				if !ok || name == "" || image == "" {
					return fmt.Errorf("--template wants NAME=IMAGE, got %q", t)
				}
				cfg.Templates[name] = image
			}
			cfg.ExtraLabels = map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return fmt.Errorf("--container-label wants KEY=VALUE, got %q", l)
				}
				cfg.ExtraLabels[k] = v
			}
			if _, ok := cfg.Templates["base"]; !ok {
				cfg.Templates["base"] = cfg.DefaultImage
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			if e2bReplay < 0 || e2bPending <= 0 || idemWait <= 0 || idemR <= 0 {
				return fmt.Errorf("TTL flags must be positive (the E2B replay window may be 0 to turn dedupe off)")
			}
			cfg.E2BPendingTTL, cfg.E2BReplayWindow, cfg.IdempotencyWait, cfg.IdempotencyRetention = e2bPending, e2bReplay, idemWait, idemR
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", envOr("SANDPIT_DATA_DIR", daemon.DefaultDataDir()), "data directory (env SANDPIT_DATA_DIR)")
	f.StringVar(&cfg.Listen, "listen", envOr("SANDPIT_LISTEN", "127.0.0.1:7420"), "API listen address (env SANDPIT_LISTEN)")
	f.StringVar(&cfg.ProxyListen, "proxy-listen", envOr("SANDPIT_PROXY_LISTEN", "127.0.0.1:7480"), "preview proxy listen address; TCP exposures bind on its host (env SANDPIT_PROXY_LISTEN)")
	f.StringVar(&cfg.Token, "token", os.Getenv("SANDPIT_TOKEN"), "API token (env SANDPIT_TOKEN); default: generated once into <data-dir>/token")
	f.StringVar(&cfg.DefaultImage, "default-image", envOr("SANDPIT_DEFAULT_IMAGE", "sandpit/base:test"), "image used when a create names none")
	f.StringArrayVar(&templates, "template", nil, "template NAME=IMAGE for the facades (repeatable); 'base' is the default image")
	f.StringVar(&cfg.Domain, "domain", envOr("SANDPIT_DOMAIN", "localhost"), "domain of preview URLs <id>-<port>.<domain>")
	f.StringVar(&cfg.PublicHost, "public-host", envOr("SANDPIT_PUBLIC_HOST", "127.0.0.1"), "host named in tcp:// URLs")
	f.StringVar(&portRange, "port-range", envOr("SANDPIT_PORT_RANGE", "22000-23000"), "host-port pool for TCP exposures")
	f.StringArrayVar(&labels, "container-label", nil, "extra KEY=VALUE label on every container (repeatable)")
	f.DurationVar(&e2bPending, "e2b-pending-ttl", 2*time.Minute, "how long an in-flight E2B create holds its claim")
	f.DurationVar(&e2bReplay, "e2b-replay-window", 10*time.Second, "how long an identical E2B create replays the same sandbox; 0 turns dedupe off")
	f.DurationVar(&idemWait, "idempotency-wait", 30*time.Second, "how long a duplicate keyed request waits for the first")
	f.DurationVar(&idemR, "idempotency-retention", 24*time.Hour, "how long an Idempotency-Key's response is kept")
	f.StringVar(&cfg.Network.Name, "network-name", envOr("SANDPIT_NETWORK_NAME", daemon.DefaultNetworkName), "Docker bridge network sandboxes join; created (inter-container traffic off) when missing")
	f.StringVar(&cfg.Network.Subnet, "network-subnet", os.Getenv("SANDPIT_NETWORK_SUBNET"), "IPv4 subnet of the network when sandpit creates it (default: Docker picks)")
	f.StringVar(&cfg.Network.Pool, "network-pool", os.Getenv("SANDPIT_NETWORK_POOL"), "without --network-subnet, take a free /24 from this IPv4 range (many daemons on one engine)")
	f.StringVar(&cfg.Network.Egress, "sandbox-egress", envOr("SANDPIT_SANDBOX_EGRESS", "public"), "default outbound policy of sandboxes: public (public addresses only) or none")
	f.StringArrayVar(&cfg.Network.Allow, "allow-cidr", nil, "IPv4 CIDR every sandbox may reach although it is private (repeatable); never link-local")
	f.StringArrayVar(&cfg.Network.DNS, "sandbox-dns", nil, "resolver whose port 53 sandboxes may reach although it is private or link-local (repeatable; default: the host's from /etc/resolv.conf, where Docker's DNS forwards)")
	f.StringVar(&logLevel, "log-level", envOr("SANDPIT_LOG_LEVEL", "info"), "debug, info, warn or error")
	return cmd
}

func uninstallCmd() *cobra.Command {
	var network string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the sandbox network and its firewall rules (refused while sandboxes are attached)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			return daemon.Uninstall(cmd.Context(), network, log)
		},
	}
	cmd.Flags().StringVar(&network, "network-name", envOr("SANDPIT_NETWORK_NAME", daemon.DefaultNetworkName), "the network serve used")
	return cmd
}
