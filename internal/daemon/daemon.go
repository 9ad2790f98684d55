// Package daemon assembles `sandpit serve`: the store, the runtime, the
// router, the service and the HTTP surfaces, and runs them until the context
// ends.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/caddy"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Config is everything `sandpit serve` takes.
type Config struct {
	DataDir      string
	Listen       string
	ProxyListen  string
	Token        string
	DefaultImage string
	Templates    map[string]string
	Domain       string
	PublicHost   string
	PortRange    sandpit.PortRange
	ExtraLabels  map[string]string

	// Router is "builtin" (default) or "caddy": routes installed through
	// the Caddy admin API at CaddyAdmin, whose HTTP server listens on
	// ProxyListen. PreviewTLS serves previews and custom domains over HTTPS
	// with on-demand certificates (Caddy only); CaddyInternalCA issues them
	// from Caddy's internal CA.
	Router          string
	CaddyAdmin      string
	PreviewTLS      bool
	CaddyInternalCA bool

	E2BPendingTTL        time.Duration
	E2BReplayWindow      time.Duration
	IdempotencyWait      time.Duration
	IdempotencyRetention time.Duration
	// AuditRetention is how long audit log entries are kept (default 90 days).
	AuditRetention time.Duration

	// WarmPool keeps started sandboxes for creates to adopt: each entry
	// names a template or image (Image), the default user and a size.
	// WarmPoolMax bounds the sum of the sizes (default 64);
	// PoolRefillConcurrency bounds the pooled containers made at once.
	WarmPool              []service.PoolSpec
	WarmPoolMax           int
	PoolRefillConcurrency int

	SweepInterval time.Duration
	Logger        *slog.Logger
	// Ready, when set, is called once the listeners are bound, with their
	// addresses (tests start the daemon on port 0).
	Ready func(apiAddr, proxyAddr string)
}

// Defaults fills zero fields with the documented defaults.
func (c *Config) Defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7420"
	}
	if c.ProxyListen == "" {
		c.ProxyListen = "127.0.0.1:7480"
	}
	if c.Domain == "" {
		c.Domain = "localhost"
	}
	// Hosts are matched lower-cased and without a trailing dot, so the
	// domain is kept that way too; "Preview.Example.COM" on the command line
	// would otherwise make URLs that never route.
	c.Domain = strings.TrimSuffix(strings.ToLower(c.Domain), ".")
	if c.PublicHost == "" {
		c.PublicHost = "127.0.0.1"
	}
	if c.PortRange.Lo == 0 {
		c.PortRange = sandpit.PortRange{Lo: 22000, Hi: 23000}
	}
	if c.E2BPendingTTL == 0 {
		c.E2BPendingTTL = 2 * time.Minute
	}
	if c.IdempotencyWait == 0 {
		c.IdempotencyWait = 30 * time.Second
	}
	if c.IdempotencyRetention == 0 {
		c.IdempotencyRetention = 24 * time.Hour
	}
	if c.AuditRetention == 0 {
		c.AuditRetention = 90 * 24 * time.Hour
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Router == "" {
		c.Router = RouterBuiltin
	}
	if c.CaddyAdmin == "" {
		c.CaddyAdmin = "http://127.0.0.1:2019"
	}
}

// validRouter refuses router flags that cannot work together, before the
// daemon opens anything.
func validRouter(c Config) error {
	switch c.Router {
	case RouterBuiltin:
		if c.PreviewTLS {
			return fmt.Errorf("--preview-tls needs --router caddy")
		}
	case RouterCaddy:
		if _, err := proxyPortOf(c); err != nil {
			return err
		}
		if err := caddy.ValidAdminURL(c.CaddyAdmin); err != nil {
			return err
		}
	default:
		return fmt.Errorf("invalid --router %q: want %q or %q", c.Router, RouterBuiltin, RouterCaddy)
	}
	return nil
}

// DefaultDataDir is /var/lib/sandpit for root, else ~/.local/share/sandpit.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/sandpit"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "sandpit")
	}
	return filepath.Join(os.TempDir(), "sandpit")
}

// domainLabel is one DNS label of the preview domain.
var domainLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// validDomain refuses a preview domain that could never appear in a Host
// header, before the daemon starts serving URLs under it.
func validDomain(d string) error {
	for _, l := range strings.Split(d, ".") {
		if !domainLabel.MatchString(l) {
			return fmt.Errorf("invalid --domain %q: want DNS labels of a-z, 0-9 and '-' separated by dots", d)
		}
	}
	return nil
}

// ParsePortRange parses "LO-HI".
func ParsePortRange(s string) (sandpit.PortRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return sandpit.PortRange{}, fmt.Errorf("invalid port range %q: want LO-HI within 1-65535", s)
	}
	return sandpit.PortRange{Lo: a, Hi: b}, nil
}

// LoadOrCreateToken returns the configured token, or the one stored in
// <data-dir>/token, generating it (mode 0600) on first start. created reports
// a fresh token, which the caller prints once.
func LoadOrCreateToken(dataDir, configured string) (token string, created bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	return loadOrCreate(filepath.Join(dataDir, "token"), "sp_")
}

// loadOrCreate reads a one-line secret file, or creates it with a random value
// and mode 0600.
func loadOrCreate(path, prefix string) (value string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, err
	}
	value = prefix + hex.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, err
	}
	// O_EXCL: two first starts racing must not each write a different value.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadOrCreate(path, prefix)
		}
		return "", false, err
	}
	defer f.Close()
	if _, err := f.WriteString(value + "\n"); err != nil {
		return "", false, err
	}
	return value, true, f.Sync()
}

// Images the daemon defaults to: the realistic one scripts/build-base-image.sh
// builds, else the small test image scripts/build-test-image.sh builds.
const (
	BaseImage = "sandpit/base:latest"
	TestImage = "sandpit/base:test"
)

// pickDefaultImage returns BaseImage when the engine has it, else TestImage.
func pickDefaultImage(ctx context.Context, rt *docker.Docker, log *slog.Logger) string {
	ok, err := rt.HasImage(ctx, BaseImage)
	if err != nil {
		log.Warn("look up the base image", "image", BaseImage, "err", err)
	}
	if ok {
		return BaseImage
	}
	log.Info("base image not built, defaulting to the test image (scripts/build-base-image.sh builds it)", "image", TestImage)
	return TestImage
}

// Run serves until ctx ends, then shuts down: in-flight requests finish and
// the store is closed.
func Run(ctx context.Context, cfg Config) error {
	cfg.Defaults()
	if err := validDomain(cfg.Domain); err != nil {
		return err
	}
	if err := validRouter(cfg); err != nil {
		return err
	}
	log := cfg.Logger
	st, err := store.Open(ctx, cfg.DataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	// The store holds the data directory exclusively, so no request that
	// claimed an idempotency key before this start is still running: free
	// those keys now, or a retry would wait out the dead attempt's lock and
	// get 409. The rows are kept for the retention period, because they name
	// the resource the dead attempt chose, which its retry must finish or
	// adopt rather than make anew.
	if n, err := st.ExpirePendingClaims(ctx, time.Now().UTC(), cfg.IdempotencyRetention); err != nil {
		return err
	} else if n > 0 {
		log.Info("expired idempotency claims of the previous run", "count", n)
	}

	token, created, err := LoadOrCreateToken(cfg.DataDir, cfg.Token)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if created {
		fmt.Fprintf(os.Stderr, "sandpit: generated API token (stored in %s):\n%s\n", filepath.Join(cfg.DataDir, "token"), token)
	}

	// The instance id labels every container this daemon makes, so that its
	// reconcile removes only its own orphans on an engine shared with other
	// daemons (other data dirs, test runs).
	instance, _, err := loadOrCreate(filepath.Join(cfg.DataDir, "instance"), "")
	if err != nil {
		return fmt.Errorf("instance id: %w", err)
	}
	instance = instance[:16]

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own executable: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("locate own executable: %w", err)
	}

	rt, err := docker.New(ctx, docker.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = pickDefaultImage(ctx, rt, log)
	}
	if cfg.Templates["base"] == "" {
		cfg.Templates = maps.Clone(cfg.Templates)
		if cfg.Templates == nil {
			cfg.Templates = map[string]string{}
		}
		cfg.Templates["base"] = cfg.DefaultImage
	}

	pool, err := resolvePool(cfg)
	if err != nil {
		return err
	}

	apiLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	// The builtin router serves the proxy listener itself; with Caddy,
	// Caddy listens there and sandpit only writes its config.
	var (
		proxyLn   net.Listener
		proxyPort int
		edg       *edge
		svc       *service.Service
	)
	if cfg.Router == RouterCaddy {
		if proxyPort, err = proxyPortOf(cfg); err != nil {
			apiLn.Close()
			return err
		}
		edg, err = newCaddyEdge(cfg, apiLn.Addr().String(), func(ctx context.Context) ([]router.Route, error) { return svc.DesiredRoutes(ctx) }, log)
		if err != nil {
			apiLn.Close()
			return err
		}
	} else {
		proxyLn, err = net.Listen("tcp", cfg.ProxyListen)
		if err != nil {
			apiLn.Close()
			return fmt.Errorf("proxy listen %s: %w", cfg.ProxyListen, err)
		}
		proxyPort = proxyLn.Addr().(*net.TCPAddr).Port
		b := newRouter(cfg, log)
		edg = &edge{Router: b, proxy: b.Handler(), close: b.Close}
	}
	closeListeners := func() {
		apiLn.Close()
		if proxyLn != nil {
			proxyLn.Close()
		}
	}

	if p := os.Getenv(crashpoint.Env); p != "" && !crashpoint.Enabled {
		log.Warn("ignoring "+crashpoint.Env+": this binary was built without crash points", "point", p)
	}

	svc = service.New(service.Config{
		DefaultImage:          cfg.DefaultImage,
		Templates:             cfg.Templates,
		WarmPool:              pool,
		PoolRefillConcurrency: cfg.PoolRefillConcurrency,
		AgentBinary:           exe,
		Domain:                cfg.Domain,
		ProxyPort:             proxyPort,
		PublicHost:            cfg.PublicHost,
		PortRange:             cfg.PortRange,
		ExtraLabels:           cfg.ExtraLabels,
		Instance:              instance,
		PreviewTLS:            cfg.PreviewTLS,
		Logger:                log,
	}, st, rt, edg.Router)

	if edg.caddy != nil {
		mode, err := edg.caddy.Start(ctx)
		if err != nil {
			closeListeners()
			return fmt.Errorf("caddy at %s: %w", cfg.CaddyAdmin, err)
		}
		if mode == caddy.TCPSandpit {
			log.Warn("caddy has no layer4 app (caddy-l4): sandpit serves TCP forwards itself", "caddy_admin", cfg.CaddyAdmin)
		} else {
			log.Info("caddy router: TCP forwards go to caddy's layer4 app", "caddy_admin", cfg.CaddyAdmin)
		}
	}

	if err := svc.Reconcile(ctx); err != nil {
		closeListeners()
		return fmt.Errorf("reconcile: %w", err)
	}
	if edg.caddy != nil {
		// Routes the store no longer knows (removed while sandpit was
		// down) go; missing ones come back.
		if err := edg.caddy.Sync(ctx); err != nil {
			log.Error("caddy reconcile at start", "err", err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	metrics := service.NewMetricsHistory(svc, 0, 0)
	surfaces(ctx, mux, cfg, svc, token, metrics)
	if cfg.Router == RouterCaddy {
		// Unauthenticated: Caddy sends no token, and the answer only says
		// whether a hostname is bound.
		mux.Handle("GET "+askPath, askHandler(svc, log))
	}

	apiSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	// Event streams last as long as their clients; ending the subscriptions
	// when the server shuts down lets Shutdown finish.
	apiSrv.RegisterOnShutdown(svc.CloseEvents)
	var proxySrv *http.Server
	if proxyLn != nil {
		proxySrv = &http.Server{Handler: edg.proxy, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}

	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	go svc.RunSweeper(bg, cfg.SweepInterval)
	go svc.WatchExits(bg)
	// The pool's refills are waited for at shutdown: one cut short removes
	// its half-made container, and must do so before the store closes.
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); svc.RunPool(bg) }()
	go metrics.Run(bg)
	go reapIdempotency(bg, st, log)
	go svc.RunAuditRetention(bg, cfg.AuditRetention, time.Hour)
	if edg.caddy != nil {
		go edg.caddy.Poll(bg)
	}

	errc := make(chan error, 2)
	go func() { errc <- apiSrv.Serve(apiLn) }()
	proxyAddr := cfg.ProxyListen
	if proxySrv != nil {
		go func() { errc <- proxySrv.Serve(proxyLn) }()
		proxyAddr = proxyLn.Addr().String()
	}
	log.Info("sandpit serving", "api", apiLn.Addr().String(), "proxy", proxyAddr, "router", cfg.Router, "data_dir", cfg.DataDir)
	if cfg.Ready != nil {
		cfg.Ready(apiLn.Addr().String(), proxyAddr)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("sandpit shutting down")
	stopBG()
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = apiSrv.Shutdown(shutCtx)
	if proxySrv != nil {
		_ = proxySrv.Shutdown(shutCtx)
	}
	_ = edg.close()
	<-poolDone
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// reapIdempotency deletes idempotency rows past both of their TTLs.
func reapIdempotency(ctx context.Context, st *store.Store, log *slog.Logger) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := st.ReapIdempotentRequests(ctx, time.Now().UTC()); err != nil && ctx.Err() == nil {
				log.Error("reap idempotency rows", "err", err)
			}
		}
	}
}

// surfaces mounts the native API and the facades.
func surfaces(ctx context.Context, mux *http.ServeMux, cfg Config, svc *service.Service, token string, metrics *service.MetricsHistory) {
	// One authenticator for every surface: the admin token or a personal
	// access token, resolved to the principal whose owner scopes the request.
	auth := api.NewAuth(svc, token)
	idem := v1.NewIdempotency(svc.Idempotency(), v1.IdempotencyConfig{
		Wait: cfg.IdempotencyWait, Retention: cfg.IdempotencyRetention, Logger: cfg.Logger,
	})
	mux.Handle("/v1/", v1.New(svc, auth, idem.Wrap))
	e2bAPI := e2b.New(svc, svc.Idempotency(), e2b.Config{Auth: auth, Domain: e2b.DomainFor(cfg.Domain, svc.Config().ProxyPort), PendingTTL: cfg.E2BPendingTTL, ReplayWindow: cfg.E2BReplayWindow, Logger: cfg.Logger, Metrics: metrics})
	mux.Handle(e2b.Prefix+"/", e2bAPI)
	// The E2B SDK puts signed file URLs at the root of E2B_SANDBOX_URL's
	// origin, i.e. here.
	mux.HandleFunc("/files", e2bAPI.SignedFiles)
	mux.Handle(daytona.DefaultPrefix+"/", daytona.New(ctx, svc, auth, daytona.Options{Logger: cfg.Logger}))
}

// resolvePool maps each warm-pool entry's template to its image and checks
// the pool's bound.
func resolvePool(cfg Config) ([]service.PoolSpec, error) {
	bound := cfg.WarmPoolMax
	if bound <= 0 {
		bound = 64
	}
	total := 0
	seen := map[string]bool{}
	out := make([]service.PoolSpec, 0, len(cfg.WarmPool))
	for _, p := range cfg.WarmPool {
		if img, ok := cfg.Templates[p.Image]; ok {
			p.Image = img
		}
		if p.Size < 0 {
			return nil, fmt.Errorf("--warm-pool %s: negative size", p.Image)
		}
		k := p.Image + "|" + p.User
		if seen[k] {
			return nil, fmt.Errorf("--warm-pool %s (user %q) given twice", p.Image, p.User)
		}
		seen[k] = true
		total += p.Size
		if p.Size > 0 {
			out = append(out, p)
		}
	}
	if total > bound {
		return nil, fmt.Errorf("--warm-pool sizes add up to %d, above --warm-pool-max %d", total, bound)
	}
	return out, nil
}

// ParseWarmPool parses a --warm-pool value,
// TEMPLATE_OR_IMAGE=N[,user=NAME][,cpu=CORES][,memory=MIB].
func ParseWarmPool(v string) (service.PoolSpec, error) {
	bad := fmt.Errorf("--warm-pool wants TEMPLATE_OR_IMAGE=N[,user=NAME][,cpu=CORES][,memory=MIB], got %q", v)
	head, opts, _ := strings.Cut(v, ",")
	i := strings.LastIndex(head, "=")
	if i <= 0 {
		return service.PoolSpec{}, bad
	}
	n, err := strconv.Atoi(head[i+1:])
	if err != nil || n < 0 {
		return service.PoolSpec{}, bad
	}
	spec := service.PoolSpec{Image: head[:i], Size: n}
	if opts != "" {
		for _, o := range strings.Split(opts, ",") {
			k, val, ok := strings.Cut(o, "=")
			if !ok || val == "" {
				return service.PoolSpec{}, bad
			}
			var err error
			switch k {
			case "user":
				spec.User = val
			case "cpu":
				spec.CPU, err = strconv.ParseFloat(val, 64)
				if err == nil && (spec.CPU <= 0 || spec.CPU > 64) {
					err = bad
				}
			case "memory":
				spec.MemoryMB, err = strconv.ParseInt(val, 10, 64)
				if err == nil && spec.MemoryMB < 16 {
					err = bad
				}
			default:
				err = bad
			}
			if err != nil {
				return service.PoolSpec{}, bad
			}
		}
	}
	return spec, nil
}
