package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/daemon"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
	tpl "github.com/sandpit-dev/sandpit/internal/templates"
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
		rateExempt                             []string
		e2bPending, e2bReplay, idemWait, idemR time.Duration
		clustered, autoPool                    bool
		cc                                     daemon.ClusterConfig
		configFile                             string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: API, store, runtime, router and facades",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := configFile
			if path == "" {
				path = defaultConfigFile
			}
			if err := applyConfig(cmd.Flags(), path, configFile != ""); err != nil {
				return err
			}
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
			for _, e := range rateExempt {
				p, err := daemon.ParseClientPrefix(e)
				if err != nil {
					return err
				}
				cfg.RateLimitExempt = append(cfg.RateLimitExempt, p)
			}
			// On the command line 0 turns a limit off; in the daemon's
			// configuration 0 is the default and a negative value is off.
			for _, v := range []*float64{&cfg.UnauthRateLimit, &cfg.AuthFailureRateLimit} {
				if *v == 0 {
					*v = -1
				}
			}
			if cfg.AuthFailureDelay == 0 {
				cfg.AuthFailureDelay = -1
			}
			if cfg.MaxStreamsPerToken == 0 {
				cfg.MaxStreamsPerToken = -1
			}
			cfg.NoAutoPool = !autoPool
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
			if e2bReplay < 0 || e2bPending <= 0 || idemWait <= 0 || idemR <= 0 || cfg.IdempotencyLock <= 0 {
				return fmt.Errorf("TTL flags must be positive (the E2B replay window may be 0 to turn dedupe off)")
			}
			if cfg.EngineTimeout <= 0 || cfg.JanitorInterval <= 0 {
				return fmt.Errorf("--engine-timeout and --janitor-interval must be positive")
			}
			cfg.Version = version
			cfg.E2BPendingTTL, cfg.E2BReplayWindow, cfg.IdempotencyWait, cfg.IdempotencyRetention = e2bPending, e2bReplay, idemWait, idemR
			if clustered {
				if cc.BootstrapExpect < 0 {
					return fmt.Errorf("--bootstrap-expect must not be negative")
				}
				if cc.DeadNodeGrace <= 0 {
					return fmt.Errorf("--dead-node-grace must be positive")
				}
				if cc.RecreateGiveUp <= 0 {
					return fmt.Errorf("--recreate-give-up must be positive")
				}
				if err := cluster.ValidFailover(cc.Failover); err != nil {
					return err
				}
				cc.Fast = os.Getenv("SANDPIT_TEST_CLUSTER_FAST") == "1"
				cfg.Cluster = &cc
			} else if cmd.Flags().Changed("join") || cc.Bootstrap || cc.BootstrapExpect > 0 ||
				cmd.Flags().Changed("dead-node-grace") || cmd.Flags().Changed("failover") || cmd.Flags().Changed("recreate-give-up") {
				return fmt.Errorf("cluster flags need --cluster")
			}
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", os.Getenv("SANDPIT_CONFIG"), "YAML file whose keys are these flags' names (env SANDPIT_CONFIG; default "+defaultConfigFile+" when it exists); flags and their environment variables override it")
	f.StringVar(&cfg.DataDir, "data-dir", envOr("SANDPIT_DATA_DIR", daemon.DefaultDataDir()), "data directory (env SANDPIT_DATA_DIR)")
	f.StringVar(&cfg.Listen, "listen", envOr("SANDPIT_LISTEN", "127.0.0.1:7420"), "API listen address (env SANDPIT_LISTEN)")
	f.StringVar(&cfg.ProxyListen, "proxy-listen", envOr("SANDPIT_PROXY_LISTEN", "127.0.0.1:7480"), "preview proxy listen address; TCP exposures bind on its host (env SANDPIT_PROXY_LISTEN)")
	f.StringVar(&cfg.SSHListen, "ssh-listen", envOr("SANDPIT_SSH_LISTEN", ""), "SSH endpoint address (ssh -p PORT SANDBOX@HOST: shells, commands, scp/sftp, ssh -L into sandboxes, with keys from sandpit ssh-key add); off when empty (env SANDPIT_SSH_LISTEN)")
	f.StringVar(&cfg.Token, "token", os.Getenv("SANDPIT_TOKEN"), "admin API token (env SANDPIT_TOKEN); prefer --token-file, since a flag shows in process listings; default: generated once into <data-dir>/token")
	f.StringVar(&tokenFile, "token-file", "", "file holding the admin API token")
	f.DurationVar(&cfg.AuditRetention, "audit-retention", 90*24*time.Hour, "how long audit log entries are kept")
	f.StringVar(&cfg.DefaultImage, "default-image", os.Getenv("SANDPIT_DEFAULT_IMAGE"), "image used when a create names none (env SANDPIT_DEFAULT_IMAGE); default: "+daemon.BaseImage+" when scripts/build-base-image.sh has built it, else "+daemon.TestImage)
	f.StringVar(&cfg.DaytonaTemplate, "daytona-template", os.Getenv("SANDPIT_DAYTONA_TEMPLATE"), "template a Daytona create naming no snapshot or image runs, as the account "+daemon.DaytonaUser+" when its image has it (env SANDPIT_DAYTONA_TEMPLATE); default: "+daemon.DaytonaTemplate+" when scripts/build-daytona-image.sh has built "+daemon.DaytonaImage+" and --default-image is not set, else the default image")
	f.StringVar(&cfg.InterpreterImage, "interpreter-image", os.Getenv("SANDPIT_INTERPRETER_IMAGE_REF"), "image of the "+daemon.InterpreterTemplate+" template (env SANDPIT_INTERPRETER_IMAGE_REF); default "+daemon.InterpreterImage+"; when it is not built yet the daemon serves at once and adds the template as soon as it is")
	f.StringVar(&cfg.ImageCacheDir, "image-cache-dir", envOr("SANDPIT_CACHE_DIR", daemon.DefaultImageCacheDir()), "where the image build scripts (scripts/build-*-image.sh) record a build's progress (env SANDPIT_CACHE_DIR, as for them): a create of "+daemon.InterpreterTemplate+" while its image is being built waits for the build, and status shows where it is")
	f.DurationVar(&cfg.DaytonaLSPTimeout, "daytona-lsp-timeout", 2*time.Minute, "how long one Daytona LSP request (symbols, completions) may wait for the language server")
	f.StringArrayVar(&templates, "template", nil, "template NAME=IMAGE for the facades (repeatable); 'base' is the default image")
	f.StringVar(&cfg.Domain, "domain", envOr("SANDPIT_DOMAIN", "localhost"), "domain of preview URLs <id>-<port>.<domain>")
	f.StringVar(&cfg.PublicHost, "public-host", envOr("SANDPIT_PUBLIC_HOST", "127.0.0.1"), "host named in tcp:// URLs")
	f.StringVar(&portRange, "port-range", envOr("SANDPIT_PORT_RANGE", "22000-23000"), "host-port pool for TCP exposures")
	f.StringArrayVar(&labels, "container-label", nil, "extra KEY=VALUE label on every container (repeatable)")
	f.DurationVar(&e2bPending, "e2b-pending-ttl", 2*time.Minute, "how long an in-flight E2B create holds its claim")
	f.DurationVar(&e2bReplay, "e2b-replay-window", 10*time.Second, "how long an identical E2B create without an Idempotency-Key replays the same sandbox; 0 turns this merge off (keys are still honoured)")
	f.DurationVar(&idemWait, "idempotency-wait", 30*time.Second, "how long a duplicate keyed request waits for the first")
	f.DurationVar(&cfg.IdempotencyLock, "idempotency-lock", 2*time.Minute, "how long a keyed request holds its Idempotency-Key before a retry may take it over (renewed while it runs)")
	f.DurationVar(&idemR, "idempotency-retention", 24*time.Hour, "how long an Idempotency-Key's response is kept")
	f.StringVar(&cfg.Router, "router", envOr("SANDPIT_ROUTER", "builtin"), "builtin (in-process proxy) or caddy (routes through the Caddy admin API; Caddy listens on --proxy-listen)")
	f.StringVar(&cfg.CaddyAdmin, "caddy-admin", envOr("SANDPIT_CADDY_ADMIN", "http://127.0.0.1:2019"), "Caddy admin API URL (--router caddy)")
	f.BoolVar(&cfg.PreviewTLS, "preview-tls", false, "serve preview and custom domains over HTTPS with on-demand certificates (--router caddy)")
	f.BoolVar(&cfg.CaddyInternalCA, "caddy-internal-ca", false, "issue --preview-tls certificates from Caddy's internal CA instead of public ACME issuers")
	f.StringVar(&cfg.TLS, "tls", envOr("SANDPIT_TLS", "off"), "HTTPS on the builtin proxy listener: off, internal (certificates on demand from a CA the daemon keeps in <data-dir>/tls; sandpit ca prints it) or auto (ACME certificates on demand; needs a public --domain and port 443) (env SANDPIT_TLS)")
	f.StringVar(&cfg.TLSCert, "tls-cert", os.Getenv("SANDPIT_TLS_CERT"), "PEM certificate (chain) the proxy serves for the names it covers, e.g. a wildcard for *.<domain>; with --tls internal or auto (env SANDPIT_TLS_CERT)")
	f.StringVar(&cfg.TLSKey, "tls-key", os.Getenv("SANDPIT_TLS_KEY"), "PEM private key of --tls-cert (env SANDPIT_TLS_KEY)")
	f.StringVar(&cfg.ACMECA, "acme-ca", os.Getenv("SANDPIT_ACME_CA"), "ACME directory URL of --tls auto (default: Let's Encrypt's production directory)")
	f.StringVar(&cfg.ACMEEmail, "acme-email", os.Getenv("SANDPIT_ACME_EMAIL"), "contact email of the --tls auto ACME account")
	f.StringArrayVar(&cfg.ReservedHostnames, "reserved-hostname", nil, "hostname no sandbox may bind as a custom domain, e.g. the API's public name; *.example.com reserves every name under it (repeatable; the daemon's own names are always reserved)")
	f.StringArrayVar(&cfg.CustomDomainSuffixes, "custom-domain-suffix", nil, "suffix under which non-admin owners may bind custom domains (repeatable; default: any name that is not reserved)")
	f.StringVar(&cfg.CustomDomainVerify, "custom-domain-verify", "none", "ownership proof non-admin owners give before binding a custom domain: none, or txt (a TXT record _sandpit-challenge.<hostname> holding the owner's token)")
	f.StringVar(&cfg.CustomDomainResolver, "custom-domain-resolver", "", "DNS server host:port --custom-domain-verify txt asks (default: the system's resolver)")
	f.DurationVar(&cfg.EngineTimeout, "engine-timeout", 30*time.Second, "time limit of every container-engine call")
	f.DurationVar(&cfg.JanitorInterval, "janitor-interval", 10*time.Second, "how often sandboxes stuck half-created or half-deleted, and orphan containers, are cleaned up")
	f.Float64Var(&cfg.DefaultCPU, "default-cpu", 1, "CPU cores of a sandbox whose create names none")
	f.Int64Var(&cfg.DefaultMemoryMB, "default-memory-mb", 1024, "memory (MiB, no swap) of a sandbox whose create names none")
	f.Float64Var(&cfg.MaxCPU, "max-cpu", 0, "most CPU cores a create may ask for; 0 means 64")
	f.Int64Var(&cfg.MaxMemoryMB, "max-memory-mb", 0, "most memory (MiB) a create may ask for; 0 means 262144")
	f.Int64Var(&cfg.PidsLimit, "pids-limit", 1024, "most processes and threads in one sandbox")
	f.Int64Var(&cfg.DiskMB, "disk-mb", daemon.DefaultDiskMB, "disk limit (MiB) of every sandbox's writable layer: a quota where the storage driver can enforce one, else the disk watcher stops a sandbox past it (the log and status say which); 0 means none")
	f.DurationVar(&cfg.DiskWatchInterval, "disk-watch-interval", service.DefaultDiskWatchInterval, "how often the disk watcher measures running sandboxes' writable layers and the volumes they write into")
	f.Int64Var(&cfg.VolumeSizeMB, "volume-size-mb", daemon.DefaultVolumeSizeMB, "size (MiB) of a volume whose create names none, and the most one may name; the disk watcher stops a sandbox writing into a volume past its size; 0 means volumes are unbounded")
	f.StringArrayVar(&cfg.AllowImages, "allow-image", nil, "glob pattern (path.Match) of images non-admin owners may run besides the templates' images and the default image (repeatable; default: only those)")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 0, "most sandboxes the daemon holds, in any state but paused; a create beyond it gets 429 quota_exceeded; 0 means no cap")
	f.IntVar(&cfg.MaxConcurrentCreates, "max-concurrent-creates", 8, "creates in progress at once; more wait their turn")
	f.StringVar(&cfg.Registry, "registry", os.Getenv("SANDPIT_REGISTRY"), "image registry HOST:PORT templates' images are pushed to and pulled from, so every cluster node runs every template (default: images stay on the node that built them)")
	f.DurationVar(&cfg.BuildTimeout, "build-timeout", tpl.DefaultBuildTimeout, "longest a template build may take before it fails")
	f.Int64Var(&cfg.MaxBuildContextMB, "max-build-context-mb", tpl.DefaultMaxContextBytes>>20, "largest uploaded template build context (one archive), MiB")
	f.Int64Var(&cfg.BuildLogMaxMB, "build-log-max-mb", tpl.DefaultBuildLogMax>>20, "log one template build keeps, in memory and on disk, MiB (its head and tail; the middle is dropped with a line saying how much); negative means no bound")
	f.Int64Var(&cfg.BuildContextQuotaMB, "build-context-quota-mb", tpl.DefaultContextQuota>>20, "uploaded build contexts one owner may keep, MiB in all; an upload beyond it gets 429 quota_exceeded; negative means no bound")
	f.IntVar(&cfg.MaxBuilds, "max-builds", tpl.DefaultMaxBuilds, "template builds the daemon runs at once; more wait for a slot")
	f.IntVar(&cfg.MaxBuildsPerOwner, "max-builds-per-owner", tpl.DefaultMaxBuildsPerOwner, "template builds one owner may run at once; more are refused with 429; negative means no cap")
	f.DurationVar(&cfg.ReadyTimeout, "template-ready-timeout", 2*time.Minute, "how long a create from a template waits for the template's ready command")
	f.StringVar(&cfg.OCIRuntime, "oci-runtime", envOr("SANDPIT_OCI_RUNTIME", "runc"), "OCI runtime registered with Docker to run sandboxes under (runc, runsc for gVisor)")
	f.Int64Var(&cfg.MaxUploadMB, "max-upload-mb", 1024, "largest request body (file uploads included), MiB")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", time.Minute, "how long a request body may take to arrive on non-streaming routes")
	f.IntVar(&cfg.MaxConns, "max-conns", 0, "connections each of the API, the preview proxy and SSH holds at once (default: a share of the file-descriptor limit; see docs/limits.md)")
	f.IntVar(&cfg.MaxConnsPerSource, "max-conns-per-source", daemon.DefaultMaxConnsPerSource, "connections one source address holds at once on each of the API, the preview proxy and SSH; negative for no bound")
	f.IntVar(&cfg.EgressMaxConns, "egress-max-conns", 0, "connections the egress proxy holds at once over every sandbox (default: a share of the file-descriptor limit)")
	f.IntVar(&cfg.EgressMaxConnsPerSandbox, "egress-max-conns-per-sandbox", daemon.DefaultEgressMaxConnsPerSandbox, "connections one sandbox holds at once through the egress proxy; negative for no bound")
	f.DurationVar(&cfg.EgressIdleTimeout, "egress-idle-timeout", daemon.DefaultEgressIdleTimeout, "how long a connection through the egress proxy may pass nothing either way before it is closed")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", daemon.DefaultDrainTimeout, "how long a shutdown waits for open requests and streams before it closes them")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection to the API or the proxy is kept")
	f.StringVar(&cfg.Network.Name, "network-name", envOr("SANDPIT_NETWORK_NAME", daemon.DefaultNetworkName), "Docker bridge network sandboxes join; created (inter-container traffic off) when missing")
	f.StringVar(&cfg.Network.Subnet, "network-subnet", os.Getenv("SANDPIT_NETWORK_SUBNET"), "IPv4 subnet of the network when sandpit creates it (default: Docker picks)")
	f.StringVar(&cfg.Network.Pool, "network-pool", os.Getenv("SANDPIT_NETWORK_POOL"), "without --network-subnet, take a free /24 from this IPv4 range (many daemons on one engine)")
	f.StringVar(&cfg.Network.Egress, "sandbox-egress", envOr("SANDPIT_SANDBOX_EGRESS", "public"), "default outbound policy of sandboxes: public (public addresses only) or none")
	f.StringArrayVar(&cfg.Network.Allow, "allow-cidr", nil, "IPv4 CIDR every sandbox may reach although it is private (repeatable); never link-local")
	f.StringArrayVar(&cfg.Network.EgressResolvers, "egress-resolver", nil, "resolver (address[:port]) the daemon asks for the names of sandboxes with domain rules (repeatable; default: the host's from /etc/resolv.conf)")
	f.StringArrayVar(&cfg.Network.EgressProfiles, "egress-profile", nil, "a named domain list sandboxes' network policies may name, as name=domain,domain,... (repeatable; built in: pypi, npm, github, debian, golang)")
	f.StringArrayVar(&cfg.Network.EgressCAs, "egress-ca", nil, "PEM file of a CA the egress proxy trusts, besides the host's trust store, for the upstreams of the hosts whose requests sandboxes' rules transform (repeatable; private upstreams, tests)")
	f.StringArrayVar(&cfg.Network.DNS, "sandbox-dns", nil, "resolver whose port 53 sandboxes may reach although it is private or link-local (repeatable; default: the host's from /etc/resolv.conf, where Docker's DNS forwards)")
	f.Float64Var(&cfg.UnauthRateLimit, "unauth-rate-limit", httpguard.DefaultUnauthRate, "requests per second (bursts of twice that) one client address may make that present no credential (signed /files URLs); beyond it 429 with Retry-After; 0 means no limit")
	f.Float64Var(&cfg.AuthFailureRateLimit, "auth-failure-rate-limit", httpguard.DefaultFailureRate, "refused credentials (401s) per second (bursts of five times that) one client address may cause; past it every request from it gets 429 until the budget refills; 0 means no limit")
	f.DurationVar(&cfg.AuthFailureDelay, "auth-failure-delay", httpguard.DefaultFailureDelay, "how long a refused request (401, or 429 of the limits above) is held before it is answered, so a flood that waits for its answers slows down; 0 means none")
	f.StringArrayVar(&rateExempt, "rate-limit-exempt", nil, "client address or CIDR the per-client rate limits do not apply to, such as a reverse proxy in front of the API (repeatable)")
	f.IntVar(&cfg.MaxStreamsPerToken, "max-streams-per-token", identity.DefaultMaxStreamsPerToken, "event streams, sockets, terminals and interpreter runs one personal access token may hold open at once; beyond it 429; 0 means no cap")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's runtime profiles under /debug/pprof/ (admin token required), e.g. go tool pprof -http=: 'http://HOST/debug/pprof/profile?seconds=10' with the token in an Authorization header")
	f.BoolVar(&cfg.MetricsPublic, "metrics-public", false, "serve /metrics without a token (default: the admin token is required)")
	f.DurationVar(&cfg.IntervalUnit, "daytona-interval-unit", time.Minute, "length of one minute of the lifecycle intervals (tests only)")
	_ = f.MarkHidden("daytona-interval-unit")
	f.BoolVar(&clustered, "cluster", false, "run as one node of a cluster (needs --cluster-key-file)")
	f.StringVar(&cc.NodeName, "node-name", envOr("SANDPIT_NODE_NAME", ""), "this node's unique name in the cluster (default <hostname>-<data dir's instance id>)")
	f.StringVar(&cc.RaftListen, "raft-listen", envOr("SANDPIT_RAFT_LISTEN", "127.0.0.1:7421"), "cluster port: Raft and node-to-node forwarding, over TLS keyed by the cluster key")
	f.StringVar(&cc.GossipListen, "gossip-listen", envOr("SANDPIT_GOSSIP_LISTEN", "127.0.0.1:7946"), "gossip address (TCP and UDP), encrypted with the cluster key")
	f.StringVar(&cc.Advertise, "advertise", envOr("SANDPIT_ADVERTISE", ""), "host the other nodes reach this one at (default: the listen addresses' host)")
	f.StringSliceVar(&cc.Join, "join", nil, "gossip addresses host:port,... of existing members (retried until one answers)")
	f.BoolVar(&cc.Bootstrap, "bootstrap", false, "form a new one-node cluster if this node has no cluster state")
	f.IntVar(&cc.BootstrapExpect, "bootstrap-expect", 0, "form the cluster once this many members have joined")
	f.StringVar(&cc.KeyFile, "cluster-key-file", envOr("SANDPIT_CLUSTER_KEY_FILE", ""), "file holding the shared cluster secret (at least 16 bytes)")
	f.DurationVar(&cc.DeadNodeGrace, "dead-node-grace", cluster.DefaultDeadNodeGrace, "how long a node stays dead in gossip before the leader applies --failover to its sandboxes")
	f.DurationVar(&cc.RecreateGiveUp, "recreate-give-up", 2*time.Minute, "with --failover recreate: how long a node retries re-creating a dead node's sandbox before it gives up and the sandbox answers 410 sandbox_lost")
	f.StringVar(&cc.Failover, "failover", cluster.FailoverOrphan, "what becomes of a dead node's sandboxes: orphan (they answer 410 sandbox_lost until deleted) or recreate (re-created on a healthy node, same id and name, fresh filesystem)")
	f.StringArrayVar(&pools, "warm-pool", nil, "keep N started sandboxes of TEMPLATE_OR_IMAGE for creates to adopt: TEMPLATE_OR_IMAGE=N[,user=NAME][,cpu=CORES][,memory=MIB] (repeatable; E2B creates act as user=user; creates asking for the pool's cpu and memory skip a live update)")
	f.IntVar(&cfg.WarmPoolMax, "warm-pool-max", 64, "upper bound of the warm pools' total size")
	f.IntVar(&cfg.PoolRefillConcurrency, "warm-pool-refill", 1, "pooled sandboxes made at once while refilling")
	f.BoolVar(&autoPool, "warm-pool-auto", envOr("SANDPIT_WARM_POOL_AUTO", "true") != "false", "size a warm pool from demand for each image no --warm-pool pins: the default image from its first create, another from its second within a minute; one slot plus one per four creates in the last minute")
	f.IntVar(&cfg.AutoPoolMax, "warm-pool-auto-max", service.DefaultPoolAutoMax, "most started sandboxes --warm-pool-auto keeps of one image")
	f.DurationVar(&cfg.AutoPoolIdle, "warm-pool-idle", service.DefaultPoolAutoIdle, "how long --warm-pool-auto keeps an image's sandboxes after its last create")
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
