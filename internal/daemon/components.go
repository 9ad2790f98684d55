package daemon

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/agentbin"
	"github.com/sandpit-dev/sandpit/internal/api"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/firewall"
	"github.com/sandpit-dev/sandpit/internal/gateway"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/mcp"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/router/caddy"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/sshd"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/ui"
)

// daemon is what its components share: each start fills in what the later
// ones use, and each stop reads what its own start filled in.
type daemon struct {
	cfg Config
	log *slog.Logger
	// lateTemplates are the daemon's templates whose image did not exist
	// at start (name -> image): served once it does.
	lateTemplates map[string]string
	started       time.Time
	pn            parsedNetwork
	// inflight counts the HTTP servers' open requests for the shutdown.
	inflight *inflight
	// budget shares the descriptors out among the listeners; apiLim and
	// proxyLim are the API's and the preview proxy's limited listeners.
	budget           connBudget
	apiLim, proxyLim *httpguard.LimitedListener

	// serving ends when ctx does, when `cluster leave` is done, or when a
	// listener fails; the background work runs under it, so it stops
	// taking work as soon as the shutdown begins.
	serving     context.Context
	stopServing context.CancelFunc

	// checkpoints writes memory-paused sandboxes to disk, when the runtime
	// can (nil: the freezer); pause says which, for the status.
	checkpoints driver.Checkpointer
	pause       apitypes.PauseStatus

	dk              *docker.Docker
	rt              driver.Driver // dk, every call under a time limit
	pool            []service.PoolSpec
	diskMB          int64
	diskWatchMB     int64
	diskStatus      apitypes.DiskStatus
	hostMemMB       int64
	hostCPUs        float64
	st              *store.Store
	token, instance string
	previewKey, exe string
	agent           string // what sandboxes mount as their agent (internal/agentbin)
	apiLn, proxyLn  net.Listener
	forwardLn       net.Listener // in a cluster behind Caddy: the preview forwarder's
	proxyPort       int
	netw            docker.Network
	fw              *firewall.Firewall
	egress          *egress.Server
	egressCA        *egress.CA
	egressRoots     *x509.CertPool
	sec             *secrets.Service
	edg             *edge
	tls             *builtin.TLS // --tls internal or auto
	mets            *metrics.Metrics
	cl              *cluster.Cluster
	svc             *service.Service
	tpl             *templates.Service
	auth            *api.Auth // the one authenticator of every surface
	bg              context.Context
	// validSignedHost is the Daytona facade's check of a signed preview
	// host, which the TLS of the builtin router asks before it issues a
	// certificate (set before the listeners serve).
	validSignedHost   func(host string) bool
	stopBG            context.CancelFunc
	caughtUp          bool
	clusterReconciled bool
	history           *service.MetricsHistory
	mcp               *mcp.HTTPHandler
	handler           http.Handler // the API listener's
	proxyHandler      http.Handler // the builtin proxy listener's
	previewLocal      http.Handler // this node's own preview proxy
	loops             sync.WaitGroup
	apiSrv            *http.Server
	proxySrv          *http.Server
	forwardSrv        *http.Server
	errc              chan error
	sshd              *sshd.Server // --ssh-listen
}

// newDaemon checks the flags that can be checked before anything is opened.
func newDaemon(ctx context.Context, cfg Config) (*daemon, error) {
	d := &daemon{cfg: cfg, log: cfg.Logger, started: time.Now().UTC(), mets: newMetrics()}
	if err := validDomain(cfg.Domain); err != nil {
		return nil, err
	}
	if err := validTLS(cfg); err != nil {
		return nil, err
	}
	if err := validRouter(cfg); err != nil {
		return nil, err
	}
	if err := validResources(cfg); err != nil {
		return nil, err
	}
	if err := validCluster(cfg); err != nil {
		return nil, err
	}
	if cfg.DaytonaLSPTimeout < 0 {
		return nil, fmt.Errorf("--daytona-lsp-timeout must not be negative")
	}
	var err error
	if d.pn, err = cfg.Network.parse(); err != nil {
		return nil, err
	}
	d.serving, d.stopServing = context.WithCancel(ctx)
	return d, nil
}

// components are the daemon's parts in the order they start. A start that
// fails stops those before it, and the shutdown stops them all, in the
// reverse order; so the list, read backwards, is the shutdown:
//
//   - the HTTP servers drain first (the event streams end with them), while
//     everything they call still runs;
//   - then the background loops end, then the service's own background work
//     (the pool's refills cut short remove their half-made containers): the
//     loops start service work, and both use the store, the router, the
//     network and the cluster's index;
//   - then this node leaves the cluster's transport, then the router closes
//     (its TCP forwards) before the network and its firewall rules go;
//   - the store closes after everything that writes to it, and the engine
//     client last.
//
// By the time the shutdown runs, serving has ended, so the background work
// and the requests other nodes forward have stopped taking work already.
func (d *daemon) components() []component {
	return []component{
		{"engine", d.openEngine, d.closeEngine},
		{"sandbox defaults", d.sandboxDefaults, nil},
		{"store", d.openStore, d.closeStore},
		{"previous run's claims", d.expireClaims, nil},
		{"secrets", d.loadSecrets, nil},
		{"listeners", d.listen, d.closeListeners},
		{"sandbox network", d.setupNetwork, d.teardownNetwork},
		{"router", d.startRouter, d.closeRouter},
		{"cluster", d.joinCluster, d.closeCluster},
		{"service", d.newService, d.waitService},
		{"reconcile", d.reconcile, nil},
		{"handlers", d.buildHandlers, nil},
		{"background loops", d.startLoops, d.stopLoops},
		{"ssh", d.startSSH, d.stopSSH},
		{"http", d.serveHTTP, d.shutdownHTTP},
	}
}

// serve blocks until the daemon is told to stop or a listener fails, and
// ends serving either way.
func (d *daemon) serve() error {
	var err error
	select {
	case <-d.serving.Done():
	case err = <-d.errc:
	}
	d.stopServing()
	return err
}

// openEngine asks the engine first, so a runtime it lacks stops the daemon
// before it touches its data directory.
func (d *daemon) openEngine(ctx context.Context) error {
	pctx, cancelPing := context.WithTimeout(ctx, d.cfg.EngineTimeout)
	dk, err := docker.New(pctx, docker.Options{Logger: d.log, Network: d.pn.name})
	cancelPing()
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	d.dk = dk
	return nil
}

func (d *daemon) closeEngine(context.Context) { d.dk.Close() }

// sandboxDefaults settles, with the engine's help, what every sandbox gets:
// the runtime, the default image and templates, the warm pool, the disk
// limit and the host's resources.
func (d *daemon) sandboxDefaults(ctx context.Context) error {
	cfg, dk, log := &d.cfg, d.dk, d.log
	if ok, err := dk.HasRuntime(ctx, cfg.OCIRuntime); err != nil {
		return fmt.Errorf("docker: %w", err)
	} else if !ok {
		return fmt.Errorf("--oci-runtime %s: the Docker engine has no such runtime registered (see scripts/ensure-runsc.sh for gVisor, scripts/ensure-runsc-checkpoint.sh for gVisor with checkpoints)", cfg.OCIRuntime)
	}
	d.pause = apitypes.PauseStatus{Runtime: cfg.OCIRuntime, Memory: "freezer"}
	if ck, err := dk.Checkpoints(ctx, cfg.OCIRuntime); err != nil {
		d.pause.Why = err.Error()
	} else {
		d.checkpoints = ck
		d.pause.Memory = "checkpoint"
	}
	// An operator's --default-image is the image of every surface, the
	// Daytona facade's too.
	explicitDefault := cfg.DefaultImage != ""
	if !explicitDefault {
		cfg.DefaultImage = pickDefaultImage(ctx, dk, log)
	}
	if cfg.Templates["base"] == "" {
		cfg.Templates = maps.Clone(cfg.Templates)
		if cfg.Templates == nil {
			cfg.Templates = map[string]string{}
		}
		cfg.Templates["base"] = cfg.DefaultImage
	}
	cfg.Templates = maps.Clone(cfg.Templates)
	d.lateTemplates = map[string]string{}
	interp := cfg.InterpreterImage
	if interp == "" {
		interp = InterpreterImage
	}
	registerImageTemplate(ctx, dk, cfg.Templates, d.lateTemplates, InterpreterTemplate, interp, "scripts/build-code-interpreter-image.sh", log)
	registerImageTemplate(ctx, dk, cfg.Templates, d.lateTemplates, DesktopTemplate, DesktopImage, "scripts/build-desktop-image.sh", log)
	registerImageTemplate(ctx, dk, cfg.Templates, nil, DaytonaTemplate, DaytonaImage, "scripts/build-daytona-image.sh", log)
	if cfg.DaytonaTemplate == "" && !explicitDefault && cfg.Templates[DaytonaTemplate] != "" {
		cfg.DaytonaTemplate = DaytonaTemplate
	}
	var err error
	if d.pool, err = resolvePool(*cfg); err != nil {
		return err
	}
	d.diskMB, d.diskWatchMB, d.diskStatus = diskLimit(ctx, dk, *cfg, log)
	d.hostMemMB, d.hostCPUs, err = dk.HostResources(ctx)
	if err != nil {
		log.Warn("host resources unknown: sandbox memory and cpu are bounded by the flags only", "err", err)
	}
	for _, pat := range cfg.AllowImages {
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("--allow-image %q: %w", pat, err)
		}
	}
	// Every engine call the service makes has a time limit, so a hung
	// engine fails requests instead of stalling them.
	d.rt = driver.WithTimeout(dk, cfg.EngineTimeout)
	log.Info("sandbox limits", "runtime", cfg.OCIRuntime, "default_cpu", cfg.DefaultCPU, "default_memory_mb", cfg.DefaultMemoryMB,
		"max_cpu", cfg.MaxCPU, "max_memory_mb", cfg.MaxMemoryMB, "host_memory_mb", d.hostMemMB, "host_cpus", d.hostCPUs,
		"pids", cfg.PidsLimit, "disk_mb", max(d.diskMB, d.diskWatchMB), "disk_mode", d.diskStatus.Mode, "volume_size_mb", cfg.VolumeSizeMB, "max_sandboxes", cfg.MaxSandboxes, "allow_images", cfg.AllowImages)
	return nil
}

func (d *daemon) openStore(ctx context.Context) error {
	st, err := store.Open(ctx, d.cfg.DataDir)
	if err != nil {
		return err
	}
	d.st = st
	return nil
}

func (d *daemon) closeStore(context.Context) { d.st.Close() }

// expireClaims: the store holds the data directory exclusively, so no
// request that claimed an idempotency key before this start is still
// running: free those keys now, or a retry would wait out the dead attempt's
// lock and get 409. The rows are kept for the retention period, because they
// name the resource the dead attempt chose, which its retry must finish or
// adopt rather than make anew.
func (d *daemon) expireClaims(ctx context.Context) error {
	n, err := d.st.ExpirePendingClaims(ctx, time.Now().UTC(), d.cfg.IdempotencyRetention)
	if err != nil {
		return err
	}
	if n > 0 {
		d.log.Info("expired idempotency claims of the previous run", "count", n)
	}
	return nil
}

// loadSecrets reads (or makes, on the first start) the admin token, the
// instance id and the preview key, and finds the agent binary.
func (d *daemon) loadSecrets(context.Context) error {
	cfg, log := d.cfg, d.log
	token, created, err := LoadOrCreateToken(cfg.DataDir, cfg.Token)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	// Never the token itself: logs are collected, shipped and read by more
	// people than the operator. It is in a file only its owner reads, and
	// the log says which (`sandpit token path` prints it too).
	switch {
	case created:
		log.Info("generated the admin token", "stored_in", filepath.Join(cfg.DataDir, "token"))
	case cfg.Token == "":
		log.Info("admin token", "stored_in", filepath.Join(cfg.DataDir, "token"))
	}
	d.token = token

	// The instance id labels every container this daemon makes, so that its
	// reconcile removes only its own orphans on an engine shared with other
	// daemons (other data dirs, test runs).
	instance, _, err := loadOrCreate(filepath.Join(cfg.DataDir, "instance"), "", instanceIDLen,
		"remove it only if the daemon has no sandboxes left: it names their containers")
	if err != nil {
		return fmt.Errorf("instance id: %w", err)
	}
	d.instance = instance[:instanceIDLen]

	// The key that signs Daytona's signed preview URLs lives in its own
	// file, so URLs stay valid across restarts and a new admin token does
	// not change it; removing the file revokes every signed URL.
	if d.previewKey, _, err = loadOrCreate(filepath.Join(cfg.DataDir, "preview-key"), "", 32,
		"remove it to generate a new key (signed preview URLs given out so far stop working)"); err != nil {
		return fmt.Errorf("preview key: %w", err)
	}

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own executable: %w", err)
	}
	if d.exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("locate own executable: %w", err)
	}
	if err := d.loadEgressTrust(); err != nil {
		return err
	}
	return d.installAgent()
}

// installAgent writes the small agent this executable embeds into the data
// directory for sandboxes to mount; a build without one (a plain go build
// rather than scripts/build.sh) mounts this executable instead, which runs
// the same agent through its agent subcommand, at several times the memory.
func (d *daemon) installAgent() error {
	path, ok, err := agentbin.Install(d.cfg.DataDir)
	switch {
	case err != nil:
		return err
	case ok:
		d.agent = path
	default:
		d.agent = d.exe
		d.log.Info("this build embeds no small agent, so sandboxes run the sandpit executable as agent; scripts/build.sh builds one that does")
	}
	// The agent is PID 1 of images that may hold no C library at all: a
	// dynamically linked one (a go build with cgo, which a machine with gcc
	// does by default) would fail every create there, so refuse at start.
	if err := agentbin.CheckStatic(d.agent); err != nil {
		if errors.Is(err, agentbin.ErrDynamic) {
			return fmt.Errorf("the in-sandbox agent %w, so it cannot start in sandboxes whose images lack its C libraries: "+
				"build sandpit statically with scripts/build.sh (or CGO_ENABLED=0 go build ./cmd/sandpit)", err)
		}
		return err
	}
	return nil
}

// listen binds the API listener and, with the builtin router, the proxy
// listener; with Caddy, Caddy listens there and sandpit only writes its
// config (and, in a cluster, binds the preview forwarder Caddy's fallback
// route proxies to).
func (d *daemon) listen(ctx context.Context) error {
	if err := d.bindListeners(); err != nil {
		d.closeListeners(ctx)
		return err
	}
	if p := os.Getenv(crashpoint.Env); p != "" && !crashpoint.Enabled {
		d.log.Warn("ignoring "+crashpoint.Env+": this binary was built without crash points", "point", p)
	}
	return nil
}

func (d *daemon) bindListeners() error {
	cfg := d.cfg
	d.budget = budgetFor(raiseNoFile(d.log), cfg)
	d.budget.log(d.log)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	d.apiLim = httpguard.LimitListener(ln, "api", d.budget.api, d.log)
	d.apiLn = d.apiLim
	if cfg.Router == RouterCaddy {
		if d.proxyPort, err = proxyPortOf(cfg); err != nil {
			return err
		}
		if cfg.Cluster != nil && !cfg.PreviewTLS {
			if d.forwardLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return fmt.Errorf("preview forwarder: %w", err)
			}
		}
		return nil
	}
	if ln, err = net.Listen("tcp", cfg.ProxyListen); err != nil {
		return fmt.Errorf("proxy listen %s: %w", cfg.ProxyListen, err)
	}
	d.proxyLim = httpguard.LimitListener(ln, "preview proxy", d.budget.proxy, d.log)
	d.proxyLn = d.proxyLim
	d.proxyPort = d.proxyLn.Addr().(*net.TCPAddr).Port
	return nil
}

// closeListeners closes what bindListeners bound; after the HTTP servers'
// shutdown they are closed already, which is harmless.
func (d *daemon) closeListeners(context.Context) {
	for _, ln := range []net.Listener{d.apiLn, d.proxyLn, d.forwardLn} {
		if ln != nil {
			ln.Close()
		}
	}
}

// setupNetwork: sandboxes may reach the host only on the proxy and the
// TCP-forward pool, which is how anyone, another sandbox included, reaches
// an exposed port.
func (d *daemon) setupNetwork(ctx context.Context) error {
	// The egress server reports refusals to the service, which is built
	// after the network; no refusal can come before, since only the
	// service gives the server sandboxes to apply rules to.
	d.egress = egress.New(egress.Config{Upstream: d.pn.egressResolvers, Operator: d.pn.allow, Logger: d.log,
		MaxConns: d.budget.egress.Total, MaxConnsPerSandbox: d.budget.egress.PerSource, IdleTimeout: d.cfg.EgressIdleTimeout,
		CA: d.egressCA, UpstreamRoots: d.egressRoots, Secrets: d.sec,
		OnDenied: func(den egress.Denial) {
			if d.svc != nil {
				d.svc.EgressDenied(den)
			}
		}})
	netw, fw, err := setupNetwork(ctx, d.dk, d.pn, d.instance, []firewall.PortRange{
		{Lo: d.proxyPort, Hi: d.proxyPort}, {Lo: d.cfg.PortRange.Lo, Hi: d.cfg.PortRange.Hi},
	}, tcpBindHost(d.cfg), d.egress, previewPortForSandboxes(d.cfg, d.proxyPort), d.log)
	if err != nil {
		d.egress.Close()
		return fmt.Errorf("sandbox network: %w", err)
	}
	d.netw, d.fw = netw, fw
	return nil
}

func (d *daemon) teardownNetwork(ctx context.Context) {
	if d.egress != nil {
		d.egress.Close()
	}
	teardownNetwork(ctx, d.dk, d.netw, d.fw, d.instance, d.log)
}

// startRouter builds the router: the builtin one, whose proxy handler the
// proxy listener serves, or Caddy's, which is asked for its base config
// here, so that a Caddy that cannot be reached stops the start.
func (d *daemon) startRouter(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	if cfg.Router != RouterCaddy {
		b := newRouter(cfg, log, d.token)
		d.edg = &edge{Router: b, proxy: d.mets.ProxyHandler(b.Handler()), close: b.Close}
		if tlsOn(cfg) {
			t, err := d.newTLS(b)
			if err != nil {
				return err
			}
			d.tls = t
			d.edg.close = func() error { t.Close(); return b.Close() }
		}
		return nil
	}
	var fallback string
	if d.forwardLn != nil {
		fallback = d.forwardLn.Addr().String()
	}
	edg, err := newCaddyEdge(cfg, d.apiLn.Addr().String(), fallback, func(ctx context.Context) ([]router.Route, error) { return d.svc.DesiredRoutes(ctx) }, log)
	if err != nil {
		return err
	}
	mode, err := edg.caddy.Start(ctx)
	if err != nil {
		return fmt.Errorf("caddy at %s: %w", cfg.CaddyAdmin, err)
	}
	if mode == caddy.TCPSandpit {
		log.Warn("caddy has no layer4 app (caddy-l4): sandpit serves TCP forwards itself", "caddy_admin", cfg.CaddyAdmin)
	} else {
		log.Info("caddy router: TCP forwards go to caddy's layer4 app", "caddy_admin", cfg.CaddyAdmin)
	}
	d.edg = edg
	return nil
}

func (d *daemon) closeRouter(context.Context) { _ = d.edg.close() }

// joinCluster makes this daemon a node of its cluster (serve --cluster).
func (d *daemon) joinCluster(ctx context.Context) error {
	if d.cfg.Cluster == nil {
		return nil
	}
	proxyAddr := d.cfg.ProxyListen
	if d.proxyLn != nil {
		proxyAddr = d.proxyLn.Addr().String()
	}
	cl, err := startCluster(ctx, d.cfg, d.instance, d.apiLn.Addr().String(), proxyAddr, d.budget.cluster)
	if err != nil {
		return err
	}
	d.cl = cl
	// Every node signs Daytona preview URLs with the key derived from the
	// cluster key, so a signed URL verifies on whichever node owns its
	// sandbox, also after a re-creation moved it.
	d.previewKey = hex.EncodeToString(cl.PreviewKey())
	return nil
}

func (d *daemon) closeCluster(context.Context) {
	if d.cl != nil {
		d.cl.Close()
	}
}

// newService builds the service and the one authenticator of every
// surface: the admin token or a personal access token, resolved to the
// principal whose owner scopes the request.
func (d *daemon) newService(context.Context) error {
	cfg := d.cfg
	domains, err := domainPolicy(cfg, d.previewKey)
	if err != nil {
		return err
	}
	trust, err := d.writeSandboxTrust()
	if err != nil {
		return err
	}
	if d.edg.caddy != nil {
		domains.HostTaken = d.edg.caddy.HostTaken
	}
	d.svc = service.New(service.Config{
		LateTemplates:  d.lateTemplates,
		ImageBuildDir:  cfg.ImageCacheDir,
		Domains:        domains,
		DefaultImage:   cfg.DefaultImage,
		Templates:      cfg.Templates,
		WarmPool:       d.pool,
		AgentBinary:    d.agent,
		TrustCAFile:    trust,
		Domain:         cfg.Domain,
		ProxyPort:      d.proxyPort,
		PublicHost:     cfg.PublicHost,
		PortRange:      cfg.PortRange,
		ExtraLabels:    cfg.ExtraLabels,
		Instance:       d.instance,
		PreviewTLS:     cfg.PreviewTLS || tlsOn(cfg),
		IntervalUnit:   cfg.IntervalUnit,
		Firewall:       d.fw,
		Egress:         d.egress,
		EgressProfiles: d.pn.egressProfiles,
		Cluster:        clusterReplica(d.cl),
		NodeName:       clusterNodeName(d.cl),
		Logger:         d.log,

		RecreateGiveUp: recreateGiveUp(cfg.Cluster),

		MaxStreamsPerToken: cfg.MaxStreamsPerToken,

		DefaultCPU:           cfg.DefaultCPU,
		DefaultMemoryMB:      cfg.DefaultMemoryMB,
		MaxCPU:               cfg.MaxCPU,
		MaxMemoryMB:          cfg.MaxMemoryMB,
		HostMemoryMB:         d.hostMemMB,
		HostCPUs:             d.hostCPUs,
		AllowImages:          cfg.AllowImages,
		PidsLimit:            cfg.PidsLimit,
		DiskMB:               d.diskMB,
		DiskWatchMB:          d.diskWatchMB,
		VolumeSizeMB:         cfg.VolumeSizeMB,
		MaxSandboxes:         cfg.MaxSandboxes,
		MaxConcurrentCreates: cfg.MaxConcurrentCreates,
		Runtime:              cfg.OCIRuntime,
		Checkpoints:          d.checkpoints,
		CheckpointDir:        filepath.Join(cfg.DataDir, "checkpoints"),
		Metrics:              d.mets,

		PoolRefillConcurrency: cfg.PoolRefillConcurrency,
		PoolAuto: service.PoolAuto{
			Enabled: !cfg.NoAutoPool, Max: cfg.AutoPoolMax, Idle: cfg.AutoPoolIdle,
			Total: min(service.DefaultPoolAutoTotal, cmp.Or(cfg.WarmPoolMax, 64)), MemAvailableMB: memAvailableMB,
		},

		Images:       d.dk,
		Volumes:      d.dk,
		ReadyTimeout: cfg.ReadyTimeout,
	}, d.st, d.mets.Driver(d.rt), d.edg.Router)
	// The template aggregate shares the service's idempotency engine and
	// event bus, and asks it which images an owner may build on.
	d.tpl = templates.New(templates.Config{
		Images:            d.dk,
		TemplateDir:       filepath.Join(cfg.DataDir, "templates"),
		DaemonTemplates:   cfg.Templates,
		Registry:          cfg.Registry,
		BuildTimeout:      cfg.BuildTimeout,
		MaxContextBytes:   cfg.MaxBuildContextMB << 20,
		MaxBuilds:         cfg.MaxBuilds,
		MaxBuildsPerOwner: cfg.MaxBuildsPerOwner,
		BuildLogMax:       mib(cfg.BuildLogMaxMB),
		ContextQuota:      mib(cfg.BuildContextQuotaMB),
		PidsLimit:         cfg.PidsLimit,
		Instance:          d.instance,
		ExtraLabels:       cfg.ExtraLabels,
		Cluster:           clusterReplica(d.cl),
		NodeName:          clusterNodeName(d.cl),
		Metrics:           d.mets,
		Logger:            d.log,
	}, d.st, d.svc.Idempotency(), d.svc.Events(), d.svc)
	d.svc.UseTemplates(d.tpl)
	d.auth = api.NewAuth(d.svc.Identity(), d.token)
	watchSources(d.mets, d.st, d.edg.Router, d.svc)
	d.bg, d.stopBG = context.WithCancel(d.serving)
	return nil
}

// waitService waits for the service's own background work (reconcile's
// restarts, the pool's refills), which ends with bg.
func (d *daemon) waitService(context.Context) {
	d.stopBG()
	d.svc.Wait()
}

// reconcile brings the store, the engine, the router and (in a cluster) the
// index into agreement before the API serves.
func (d *daemon) reconcile(ctx context.Context) error {
	cfg, log, cl, svc := d.cfg, d.log, d.cl, d.svc
	// A restarted node must drop, before its reconcile restarts anything,
	// its copies of the sandboxes the cluster re-created elsewhere or
	// deleted while it was away: the index decides, so no sandbox runs
	// twice. That needs this node's copy of the index to be current, which
	// needs the cluster's leader, which the other nodes provide.
	if cl != nil && cl.Replica().HasState() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := cl.WaitCaughtUp(rctx); err != nil {
			log.Warn("cluster: not caught up before serving", "err", err)
		} else if err := svc.DropStale(rctx); err != nil {
			log.Warn("cluster: drop stale sandboxes before serving", "err", err)
		} else {
			d.caughtUp = true
		}
		cancel()
	}
	// The per-sandbox checks run behind the API, which serves at once: a
	// sandbox not checked yet shows as starting, and a call that needs it
	// checks it first. Caddy's route sync and the cluster's reconcile work
	// from the checked store, so with either the start waits for the checks.
	if err := d.tpl.RecoverBuilds(d.bg); err != nil {
		return fmt.Errorf("reconcile template builds: %w", err)
	}
	// The checkpoint probe runs a program that may take a moment; the
	// start does not wait for its log line.
	go probeCheckpoints(d.bg, d.log, d.pause)
	// Volumes half made or half deleted by the previous process are
	// settled before the API serves, so a retry of their create finds
	// nothing half made.
	if err := svc.Volumes().ReconcileVolumes(ctx); err != nil {
		log.Warn("reconcile volumes", "err", err)
	}
	if err := svc.StartReconcile(d.bg); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if d.edg.caddy != nil || cl != nil {
		if err := svc.WaitChecked(ctx); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	if d.edg.caddy != nil {
		// Routes the store no longer knows (removed while sandpit was
		// down) go; missing ones come back.
		if err := d.edg.caddy.Sync(ctx); err != nil {
			log.Error("caddy reconcile at start", "err", err)
		}
	}
	// A restarted node must release the placements its interrupted creates
	// left (reconcile has just unwound their rows) before it serves: a
	// retry resuming such a create would otherwise race the release. A
	// node that could not catch up in time serves anyway and reconciles in
	// the background.
	if d.caughtUp {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := svc.ReconcileCluster(rctx, d.started, cfg.IdempotencyRetention); err != nil {
			log.Warn("cluster: reconcile before serving", "err", err)
		} else {
			d.clusterReconciled = true
		}
		cancel()
	}
	return nil
}

// buildHandlers mounts every surface on the API listener's handler and
// builds the proxy listener's.
func (d *daemon) buildHandlers(ctx context.Context) error {
	cfg, svc := d.cfg, d.svc
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	d.history = service.NewMetricsHistory(svc, 0, 0)
	dt, routes := surfaces(ctx, mux, cfg, svc, d.tpl, d.sec, d.auth, d.previewKey, d.history, max(d.diskMB, d.diskWatchMB))
	mux.Handle("GET /metrics", metricsHandler(d.mets, d.auth, cfg.MetricsPublic))
	if cfg.Pprof {
		mux.Handle("GET /debug/pprof/", pprofHandler(d.auth))
	}
	spec, err := openAPIHandler()
	if err != nil {
		return err
	}
	mux.Handle("GET /v1/openapi.json", spec)
	mux.Handle("GET /v1/status", v1.StatusHandler(d.auth, d.statusSource()))
	mux.Handle("GET "+ui.Prefix, ui.Handler())
	mux.Handle("GET /ui", http.RedirectHandler(ui.Prefix, http.StatusMovedPermanently))
	d.mcp = d.mcpHandler()
	mux.Handle(mcpPath, d.mcp)
	if cfg.Router == RouterCaddy {
		// Unauthenticated: Caddy sends no token, and the answer only says
		// whether a hostname is bound.
		mux.Handle("GET "+askPath, askHandler(svc, d.log))
	}
	d.handler = mux
	if cl := d.cl; cl != nil {
		// `cluster leave` ends serving from inside, once it is done.
		mux.Handle("/v1/cluster/", v1.ClusterHandler(cl, d.auth, d.stopServing))
		d.handler = clusterRouter(cl, d.auth, svc, d.tpl, mux, routes)
	}
	if d.proxyLn != nil {
		// The Daytona gate checks signed preview hosts and records preview
		// traffic as sandbox activity before the router proxies a request.
		resolve := func(sandpit.PreviewHost) bool { return true }
		if b, ok := d.edg.Router.(*builtin.Builtin); ok {
			resolve = func(p sandpit.PreviewHost) bool { _, ok := b.ResolvePreview(p); return ok }
		}
		d.previewLocal = dt.PreviewGate(wakeOnPreview(svc, d.log, d.edg.proxy, resolve))
		if err := d.servePreviewToSandboxes(); err != nil {
			return err
		}
		d.validSignedHost = dt.ValidSignedPreviewHost
		d.proxyHandler = clusterPreview(d.cl, cfg, d.previewLocal)
	}
	if d.forwardLn != nil && d.cl != nil {
		d.previewLocal = caddyLocalPreview(cfg.ProxyListen)
	}
	return nil
}

// statusSource is what GET /v1/status reports on.
func (d *daemon) statusSource() v1.StatusSource {
	src := v1.StatusSource{
		Version: d.cfg.Version, Router: d.cfg.Router, Node: d.cfg.Listen, Started: time.Now(),
		DataDir: d.st.Dir(), Disk: d.diskStatus,
		PingEngine: d.dk.Ping, SandboxesByState: d.st.CountSandboxesByState, StoreStats: d.st.Stats,
		AwaitedTemplates: d.svc.AwaitedTemplates,
		Pause:            d.pause,
	}
	if d.svc.PoolEnabled() {
		src.PoolReady = d.svc.PoolReady
	}
	if cl := d.cl; cl != nil {
		src.Cluster = func() apitypes.ClusterStatus {
			return apitypes.ClusterStatus{Enabled: true, Node: cl.NodeName(), Nodes: len(cl.Members())}
		}
	}
	return src
}

// startLoops starts the background work, which ends with bg.
func (d *daemon) startLoops(context.Context) error {
	cfg, svc, bg := d.cfg, d.svc, d.bg
	for _, loop := range []func(){
		func() { svc.RunSweeper(bg, cfg.SweepInterval) },
		func() { svc.RunJanitor(bg, cfg.JanitorInterval) },
		func() { svc.WatchEngine(bg) },
		// The pool's refills are waited for at shutdown: one cut short
		// removes its half-made container, and must do so before the
		// store closes.
		func() { svc.RunPool(bg) },
		func() { svc.RunDiskWatcher(bg, cfg.DiskWatchInterval) },
		func() { d.history.Run(bg) },
		func() { reapIdempotency(bg, d.st, d.log) },
		func() { svc.Identity().RunAuditRetention(bg, cfg.AuditRetention, time.Hour) },
		// In a cluster: re-create what the leader moved here, drop what
		// moved away (a no-op on a single node).
		func() { svc.RunFailover(bg, 2*time.Second) },
		// Templates whose image is built after the daemon started.
		func() { svc.WatchLateTemplates(bg, 5*time.Second) },
	} {
		d.loops.Add(1)
		go func() {
			defer d.loops.Done()
			loop()
		}()
	}
	if d.edg.caddy != nil {
		d.loops.Add(1)
		go func() {
			defer d.loops.Done()
			d.edg.caddy.Poll(bg)
		}()
	}
	if d.cl != nil {
		// Other nodes' proxies hand this node the previews of its
		// sandboxes on the same channel as forwarded API requests.
		go d.cl.ServeForwarded(bg, gateway.ForwardedSplit(d.handler, d.previewLocal))
		if !d.clusterReconciled {
			go reconcileCluster(bg, d.cl, svc, d.started, cfg.IdempotencyRetention, d.log)
		}
	}
	return nil
}

// stopLoops ends the loops and waits for them: the watcher starts service
// background work, so it ends before the service's work is waited for.
func (d *daemon) stopLoops(context.Context) {
	d.stopBG()
	d.loops.Wait()
}

// serveHTTP serves the API listener and, with the builtin router, the proxy
// listener; in a cluster behind Caddy also the preview forwarder.
func (d *daemon) serveHTTP(context.Context) error {
	cfg, log := d.cfg, d.log
	guard := httpguard.Options{MaxBody: cfg.MaxUploadMB << 20, ReadTimeout: cfg.ReadTimeout}
	d.inflight = newInflight()
	d.apiSrv = d.newServer(d.inflight.wrap(api.AccessLog(log, clientLimiter(cfg).Wrap(httpguard.Guard(d.handler, guard), servedWithoutCredential))))
	// Event streams last as long as their clients; ending the subscriptions
	// when the server shuts down lets Shutdown finish.
	d.apiSrv.ConnState = d.apiLim.ConnState
	d.apiSrv.RegisterOnShutdown(d.svc.Events().Close)
	d.apiSrv.RegisterOnShutdown(d.mcp.Close)
	if d.proxyLn != nil {
		d.proxySrv = d.newServer(d.inflight.wrap(httpguard.Guard(d.proxyHandler, guard)))
		d.proxySrv.ConnState = d.proxyLim.ConnState
		if d.tls != nil {
			d.proxySrv.Handler = splitAPIHost(cfg, d.apiSrv.Handler, d.proxySrv.Handler)
		}
	}
	if d.forwardLn != nil && d.cl != nil {
		d.forwardSrv = d.newServer(httpguard.Guard(caddyForwarder(d.cl, cfg), guard))
	}

	d.errc = make(chan error, 3)
	go func() { d.errc <- d.apiSrv.Serve(d.apiLn) }()
	if d.forwardSrv != nil {
		go func() { d.errc <- d.forwardSrv.Serve(d.forwardLn) }()
	}
	proxyAddr := cfg.ProxyListen
	if d.proxySrv != nil {
		if d.tls != nil {
			d.proxySrv.TLSConfig = d.tls.Config()
			go func() { d.errc <- d.proxySrv.ServeTLS(d.proxyLn, "", "") }()
		} else {
			ln := &tlsOnPlainListener{Listener: d.proxyLn, log: log,
				hint: "an E2B SDK without E2B_SANDBOX_URL does this to reach sandboxes; set E2B_SANDBOX_URL=http://" + d.apiLn.Addr().String() + "/e2b/envd, or serve with --tls internal (docs/e2b.md)"}
			go func() { d.errc <- d.proxySrv.Serve(ln) }()
		}
		proxyAddr = d.proxyLn.Addr().String()
	}
	tlsMode := cfg.TLS
	if tlsMode == "" {
		tlsMode = TLSOff
	}
	log.Info("sandpit serving", "api", d.apiLn.Addr().String(), "proxy", proxyAddr, "router", cfg.Router, "tls", tlsMode, "data_dir", cfg.DataDir)
	if cfg.TLS == TLSInternal {
		log.Info("tls: preview hosts use certificates of the internal CA; trust it from this file (sandpit ca prints it)", "ca_cert", CACertPath(cfg.DataDir))
	}
	go warnUnresolvable(d.bg, cfg.Domain, log)
	if cfg.Ready != nil {
		cfg.Ready(d.apiLn.Addr().String(), proxyAddr)
	}
	return nil
}

func (d *daemon) newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    d.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
}

// mib turns a size flag in MiB into bytes, keeping a negative value (no
// bound) negative and zero (the default) zero.
func mib(n int64) int64 {
	if n < 0 {
		return -1
	}
	return n << 20
}

// The template aggregate is what the sandbox aggregate resolves templates
// through; the check is here because internal/templates may not import
// internal/service.
var _ service.TemplateResolver = (*templates.Service)(nil)
