package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
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
		portRange, logLevel, tokenFile         string
		templates, labels, pools               []string
		e2bPending, e2bReplay, idemWait, idemR time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: API, store, runtime, router and facades",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokenFile != "" {
				if cfg.Token != "" {
					return fmt.Errorf("give --token-file or --token (SANDPIT_TOKEN), not both")
				}
				tok, err := client.ReadTokenFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				cfg.Token = tok
			}
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
			for _, p := range pools {
				spec, err := daemon.ParseWarmPool(p)
				if err != nil {
					return err
				}
				cfg.WarmPool = append(cfg.WarmPool, spec)
			}
			cfg.ExtraLabels = map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return fmt.Errorf("--container-label wants KEY=VALUE, got %q", l)
				}
				cfg.ExtraLabels[k] = v
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
	f.StringVar(&cfg.Token, "token", os.Getenv("SANDPIT_TOKEN"), "admin API token (env SANDPIT_TOKEN); prefer --token-file, since a flag shows in process listings; default: generated once into <data-dir>/token")
	f.StringVar(&tokenFile, "token-file", "", "file holding the admin API token")
	f.DurationVar(&cfg.AuditRetention, "audit-retention", 90*24*time.Hour, "how long audit log entries are kept")
	f.StringVar(&cfg.DefaultImage, "default-image", os.Getenv("SANDPIT_DEFAULT_IMAGE"), "image used when a create names none (env SANDPIT_DEFAULT_IMAGE); default: "+daemon.BaseImage+" when scripts/build-base-image.sh has built it, else "+daemon.TestImage)
	f.StringArrayVar(&templates, "template", nil, "template NAME=IMAGE for the facades (repeatable); 'base' is the default image")
	f.StringVar(&cfg.Domain, "domain", envOr("SANDPIT_DOMAIN", "localhost"), "domain of preview URLs <id>-<port>.<domain>")
	f.StringVar(&cfg.PublicHost, "public-host", envOr("SANDPIT_PUBLIC_HOST", "127.0.0.1"), "host named in tcp:// URLs")
	f.StringVar(&portRange, "port-range", envOr("SANDPIT_PORT_RANGE", "22000-23000"), "host-port pool for TCP exposures")
	f.StringArrayVar(&labels, "container-label", nil, "extra KEY=VALUE label on every container (repeatable)")
	f.DurationVar(&e2bPending, "e2b-pending-ttl", 2*time.Minute, "how long an in-flight E2B create holds its claim")
	f.DurationVar(&e2bReplay, "e2b-replay-window", 10*time.Second, "how long an identical E2B create replays the same sandbox; 0 turns dedupe off")
	f.DurationVar(&idemWait, "idempotency-wait", 30*time.Second, "how long a duplicate keyed request waits for the first")
	f.DurationVar(&idemR, "idempotency-retention", 24*time.Hour, "how long an Idempotency-Key's response is kept")
	f.StringVar(&cfg.Router, "router", envOr("SANDPIT_ROUTER", "builtin"), "builtin (in-process proxy) or caddy (routes through the Caddy admin API; Caddy listens on --proxy-listen)")
	f.StringVar(&cfg.CaddyAdmin, "caddy-admin", envOr("SANDPIT_CADDY_ADMIN", "http://127.0.0.1:2019"), "Caddy admin API URL (--router caddy)")
	f.BoolVar(&cfg.PreviewTLS, "preview-tls", false, "serve preview and custom domains over HTTPS with on-demand certificates (--router caddy)")
	f.BoolVar(&cfg.CaddyInternalCA, "caddy-internal-ca", false, "issue --preview-tls certificates from Caddy's internal CA instead of public ACME issuers")
	f.StringArrayVar(&pools, "warm-pool", nil, "keep N started sandboxes of TEMPLATE_OR_IMAGE for creates to adopt: TEMPLATE_OR_IMAGE=N[,user=NAME][,cpu=CORES][,memory=MIB] (repeatable; E2B creates act as user=user; creates asking for the pool's cpu and memory skip a live update)")
	f.IntVar(&cfg.WarmPoolMax, "warm-pool-max", 64, "upper bound of the warm pools' total size")
	f.IntVar(&cfg.PoolRefillConcurrency, "warm-pool-refill", 1, "pooled sandboxes made at once while refilling")
	f.StringVar(&logLevel, "log-level", envOr("SANDPIT_LOG_LEVEL", "info"), "debug, info, warn or error")
	return cmd
}
