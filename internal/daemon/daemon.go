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
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/gateway"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/router/caddy"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// Config is everything `sandpit serve` takes.
type Config struct {
	DataDir      string
	Listen       string
	ProxyListen  string
	Token        string
	DefaultImage string
	// InterpreterImage is the code-interpreter template's image; empty
	// means InterpreterImage (the tag scripts/build-code-interpreter-image.sh
	// makes).
	InterpreterImage string
	// ImageCacheDir is where the image build scripts record a build's
	// progress (their SANDPIT_CACHE_DIR): a create of the interpreter
	// template while its image is being built waits for the build.
	ImageCacheDir string
	Templates     map[string]string
	// DaytonaTemplate is the template a Daytona create naming no snapshot
	// or image runs, as the account DaytonaUser when its image has one.
	// Empty: DaytonaTemplate when its image is built and DefaultImage was
	// not set, else the default image.
	DaytonaTemplate string
	// Pprof serves Go's profiles under /debug/pprof/ to the admin token.
	Pprof bool
	// DaytonaLSPTimeout bounds one request to a Daytona LSP server.
	DaytonaLSPTimeout time.Duration
	Domain            string
	PublicHost        string
	PortRange         sandpit.PortRange
	ExtraLabels       map[string]string
	// SSHListen, when set, serves the SSH endpoint there (internal/sshd).
	SSHListen string
	// Network is the sandbox network and its default egress policy.
	Network NetworkConfig

	// Router is "builtin" (default) or "caddy": routes installed through
	// the Caddy admin API at CaddyAdmin, whose HTTP server listens on
	// ProxyListen. PreviewTLS serves previews and custom domains over HTTPS
	// with on-demand certificates (Caddy only); CaddyInternalCA issues them
	// from Caddy's internal CA.
	Router          string
	CaddyAdmin      string
	PreviewTLS      bool
	CaddyInternalCA bool

	// TLS makes the builtin proxy listener speak HTTPS: "internal" issues
	// certificates on demand from a CA kept in the data directory, "auto"
	// obtains them through ACME (certmagic); "off" or "" is plain HTTP.
	// TLSCert/TLSKey are a certificate the operator has, served for the
	// names it covers. ACMECA and ACMEEmail configure "auto".
	TLS       string
	TLSCert   string
	TLSKey    string
	ACMECA    string
	ACMEEmail string

	// Custom hostnames: ReservedHostnames are names (or "*.suffix") no
	// sandbox may bind, besides the daemon's own; CustomDomainSuffixes,
	// when set, are the only suffixes non-admin owners may bind under;
	// CustomDomainVerify "txt" asks non-admin owners for a TXT record
	// proving the name is theirs, looked up at CustomDomainResolver
	// (host:port; default the system's resolver).
	ReservedHostnames    []string
	CustomDomainSuffixes []string
	CustomDomainVerify   string
	CustomDomainResolver string

	E2BPendingTTL        time.Duration
	E2BReplayWindow      time.Duration
	IdempotencyWait      time.Duration
	IdempotencyRetention time.Duration
	// AuditRetention is how long audit log entries are kept (default 90 days).
	AuditRetention time.Duration
	// IdempotencyLock is how long a keyed /v1 request holds its key before a
	// retry may presume it dead (default 2m); it is renewed while it runs.
	IdempotencyLock time.Duration

	// Resources of every sandbox: defaults for creates that name none and
	// maxima a create may ask for (see service.Config).
	DefaultCPU      float64
	DefaultMemoryMB int64
	MaxCPU          float64
	MaxMemoryMB     int64
	PidsLimit       int64
	DiskMB          int64 // disk limit of a sandbox: the engine's quota where it can, else the disk watcher's
	// VolumeSizeMB is a volume's default and largest size, enforced by the
	// disk watcher; 0 means volumes are unbounded.
	VolumeSizeMB int64
	// DiskWatchInterval is how often the disk watcher measures sandboxes
	// (default service.DefaultDiskWatchInterval).
	DiskWatchInterval    time.Duration
	MaxSandboxes         int
	MaxConcurrentCreates int
	// Template builds (see service.Config): the registry images go
	// through, and the limits of builds.
	Registry          string
	BuildTimeout      time.Duration
	MaxBuildContextMB int64
	MaxBuilds         int
	MaxBuildsPerOwner int
	ReadyTimeout      time.Duration
	// BuildLogMaxMB and BuildContextQuotaMB bound one build's log and one
	// owner's uploaded contexts (negative: no bound).
	BuildLogMaxMB       int64
	BuildContextQuotaMB int64
	// AllowImages are glob patterns of images non-admin owners may run
	// besides the templates' and the default image (--allow-image).
	AllowImages []string
	// OCIRuntime is the engine runtime sandboxes run under (runc, runsc).
	OCIRuntime string

	// Bounds of the HTTP surfaces: request bodies (uploads included), how
	// long a request body may take to arrive on non-streaming routes, and
	// how long an idle keep-alive connection is kept.
	MaxUploadMB    int64
	ReadTimeout    time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// Connection budgets (see budget.go): per listener in all (0: a share
	// of the descriptor limit), per source address (0: the default,
	// negative: none), and the egress proxy's in all and per sandbox.
	MaxConns, MaxConnsPerSource              int
	EgressMaxConns, EgressMaxConnsPerSandbox int
	EgressIdleTimeout                        time.Duration
	// DrainTimeout bounds how long a shutdown waits for open requests
	// (streams included) before it closes them; default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool
	// Per-client limits on the API listener (see httpguard.ClientLimits):
	// requests per second that present no credential, and refused
	// credentials per second; 0 means the default, negative no limit.
	// RateLimitExempt are the client addresses they do not apply to.
	UnauthRateLimit      float64
	AuthFailureRateLimit float64
	RateLimitExempt      []netip.Prefix
	// AuthFailureDelay holds every refused request (401, and the limits'
	// 429) that long before answering: 0 means the default, negative none.
	AuthFailureDelay time.Duration
	// MaxStreamsPerToken bounds the sessions one personal token holds
	// open (0: identity.DefaultMaxStreamsPerToken; negative: no bound).
	MaxStreamsPerToken int
	// Version is the binary's version, reported by /v1/status.
	Version string

	// Cluster, when set, makes this daemon one node of a cluster (serve
	// --cluster); nil is a single node, exactly as without cluster support.
	Cluster *ClusterConfig
	// WarmPool keeps started sandboxes for creates to adopt: each entry
	// names a template or image (Image), the default user and a size.
	// WarmPoolMax bounds the sum of the sizes (default 64);
	// PoolRefillConcurrency bounds the pooled containers made at once.
	WarmPool              []service.PoolSpec
	WarmPoolMax           int
	PoolRefillConcurrency int
	// NoAutoPool turns off the pools sized from demand (service.PoolAuto)
	// for the images no --warm-pool pins; AutoPoolMax is the most slots
	// one image gets, AutoPoolIdle how long they stay after its last
	// create.
	NoAutoPool   bool
	AutoPoolMax  int
	AutoPoolIdle time.Duration

	SweepInterval time.Duration
	// IntervalUnit is the unit of the lifecycle intervals (Daytona's
	// auto-stop, auto-archive and auto-delete minutes); default one minute.
	// Tests shorten it with the hidden --daytona-interval-unit flag.
	IntervalUnit time.Duration
	// EngineTimeout bounds every container-engine call (default 30s).
	EngineTimeout time.Duration
	// JanitorInterval is how often rows stuck in creating or deleting are
	// finished (default 10s).
	JanitorInterval time.Duration
	Logger          *slog.Logger
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
	if c.OCIRuntime == "" {
		c.OCIRuntime = "runc"
	}
	if c.MaxUploadMB == 0 {
		c.MaxUploadMB = 1024
	}
	if c.UnauthRateLimit == 0 {
		c.UnauthRateLimit = httpguard.DefaultUnauthRate
	}
	if c.AuthFailureRateLimit == 0 {
		c.AuthFailureRateLimit = httpguard.DefaultFailureRate
	}
	if c.AuthFailureDelay == 0 {
		c.AuthFailureDelay = httpguard.DefaultFailureDelay
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = time.Minute
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Second
	}
	if c.EngineTimeout == 0 {
		c.EngineTimeout = 30 * time.Second
	}
	if c.JanitorInterval == 0 {
		c.JanitorInterval = 10 * time.Second
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

// DefaultImageCacheDir is the image build scripts' own default
// SANDPIT_CACHE_DIR: /var/cache/sandpit for root, else the user's cache.
func DefaultImageCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/sandpit"
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "sandpit")
	}
	return ""
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
// a fresh token; the caller logs where it is stored, never the token.
func LoadOrCreateToken(dataDir, configured string) (token string, created bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	return loadOrCreate(filepath.Join(dataDir, "token"), "sp_", 1, "remove it to generate a new token")
}

// instanceIDLen is how much of the instance file names this daemon's
// containers.
const instanceIDLen = 16

// ErrCorruptSecret: a secret file exists but cannot be what this daemon
// wrote. It is never overwritten: a token clients hold, or an instance id
// that names existing containers, would be lost silently.
var ErrCorruptSecret = errors.New("corrupt secret file")

// loadOrCreate reads a one-line secret file of at least minLen characters,
// or creates it with a random value and mode 0600. The file is written
// under a temporary name, synced and then linked into place, so a crash
// never leaves an empty or half-written file behind, and two first starts
// racing agree on one value.
func loadOrCreate(path, prefix string, minLen int, fix string) (value string, created bool, err error) {
	for range 3 {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			v := strings.TrimSpace(string(b))
			if len(v) < minLen {
				return "", false, fmt.Errorf("%w: %s holds %d characters, want at least %d; %s", ErrCorruptSecret, path, len(v), minLen, fix)
			}
			return v, false, nil
		case !errors.Is(err, fs.ErrNotExist):
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
		tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
		if err != nil {
			return "", false, err
		}
		_, werr := tmp.WriteString(value + "\n")
		if werr == nil {
			werr = tmp.Sync()
		}
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			// CreateTemp makes the file 0600 already; Link refuses to
			// replace an existing file, which is the O_EXCL of a rename.
			werr = os.Link(tmp.Name(), path)
		}
		os.Remove(tmp.Name())
		if werr == nil {
			return value, true, nil
		}
		if !errors.Is(werr, fs.ErrExist) {
			return "", false, werr
		}
		// Another start linked its value first: read that one.
	}
	return "", false, fmt.Errorf("%s: could not read or create it", path)
}

// Images the daemon defaults to: the realistic one scripts/build-base-image.sh
// builds, else the small test image scripts/build-test-image.sh builds.
const (
	BaseImage = "sandpit/base:latest"
	TestImage = "sandpit/base:test"
)

// The code-interpreter template: the image
// scripts/build-code-interpreter-image.sh builds, registered under E2B's
// template name, which @e2b/code-interpreter's Sandbox.create() asks for.
const (
	InterpreterImage    = "sandpit/code-interpreter:latest"
	InterpreterTemplate = "code-interpreter-v1"
)

// The desktop template: the image scripts/build-desktop-image.sh builds (an
// X server, Xfce, xdotool, a VNC server with noVNC, Chromium), registered
// under the name @e2b/desktop's Sandbox.create() asks for, which is also
// the Daytona snapshot computer use runs on.
const (
	DesktopImage    = "sandpit/desktop:latest"
	DesktopTemplate = "desktop"
)

// The Daytona facade's default template: the image
// scripts/build-daytona-image.sh builds (the base image with Daytona's
// `daytona` account, `python` and a TypeScript language server), and the
// account its sandboxes act as.
const (
	DaytonaImage    = "sandpit/daytona:latest"
	DaytonaTemplate = "daytona"
	DaytonaUser     = "daytona"
)

// registerImageTemplate adds a template of one of the daemon's own images
// when that image is built and the operator has not named the template
// otherwise; script is what builds the image, for the log line.
func registerImageTemplate(ctx context.Context, rt *docker.Docker, templates, late map[string]string, name, image, script string, log *slog.Logger) {
	if templates[name] != "" {
		return
	}
	ok, err := rt.HasImage(ctx, image)
	if err != nil {
		log.Warn("look up a template's image", "template", name, "image", image, "err", err)
	}
	if !ok {
		// Not a reason to wait: the daemon serves now, and the template
		// once its image is built (service.WatchLateTemplates).
		log.Info("image not built yet: template "+name+" is served once it is ("+script+" builds it; no restart needed)", "image", image)
		if late != nil {
			late[name] = image
		}
		return
	}
	templates[name] = image
}

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
// the store is closed. The daemon is its components (see components): they
// start in order, and whatever has started is stopped in the reverse order,
// after a failed start as at the shutdown.
func Run(ctx context.Context, cfg Config) error {
	cfg.Defaults()
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.stopServing()
	stop, err := startAll(ctx, d.components())
	if err != nil {
		return err
	}
	serveErr := d.serve()
	d.log.Info("sandpit shutting down")
	stop(context.WithoutCancel(ctx))
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

// surfaces mounts the native API and the facades, and returns the Daytona
// facade, whose preview gate fronts the builtin proxy.
func surfaces(ctx context.Context, mux *http.ServeMux, cfg Config, svc *service.Service, tpl *templates.Service, sec *secrets.Service, auth *api.Auth, previewKey string, metrics *service.MetricsHistory, diskMB int64) (*daytona.Handler, *gateway.Table) {
	// One Idempotency-Key layer for every wire: the same engine, store and
	// cluster claims, the same replay, mismatch and in-flight answers.
	idem := api.NewIdempotency(svc.Idempotency(), api.IdempotencyConfig{
		Wait: cfg.IdempotencyWait, Retention: cfg.IdempotencyRetention, PendingTTL: cfg.IdempotencyLock, Logger: cfg.Logger,
	})
	native := v1.New(svc, tpl, auth, v1RouteWrap, idem)
	native.ServeSecrets(sec)
	mux.Handle("/v1/", native)
	e2bAPI := e2b.New(svc, svc.Idempotency(), e2b.Config{Templates: tpl, Secrets: sec, Auth: auth, Domain: e2b.DomainFor(cfg.Domain, svc.Config().ProxyPort), PendingTTL: cfg.E2BPendingTTL, ReplayWindow: cfg.E2BReplayWindow, Keys: idem, KeyRetention: cfg.IdempotencyRetention, DiskSizeMB: diskMB, Logger: cfg.Logger, Metrics: metrics, NodeName: svc.Config().NodeName, UploadKey: []byte(previewKey)})
	mux.Handle(e2b.Prefix+"/", e2bAPI)
	// The E2B SDK puts signed file URLs at the root of E2B_SANDBOX_URL's
	// origin, i.e. here.
	mux.HandleFunc("/files", e2bAPI.SignedFiles)
	dt := daytona.New(ctx, svc, auth, daytona.Options{PreviewKey: []byte(previewKey), Logger: cfg.Logger, DefaultTemplate: cfg.DaytonaTemplate, DefaultUser: daytonaUser(cfg), SSHAddr: cfg.SSHListen, SSHHost: cfg.PublicHost, LSPTimeout: cfg.DaytonaLSPTimeout, Idempotency: idem, Templates: tpl})
	mux.Handle(daytona.DefaultPrefix+"/", dt)
	native.AddSurface(v1.Surface{Mount: e2b.Prefix, Routes: e2bAPI.Routes()})
	native.AddSurface(v1.Surface{Mount: daytona.DefaultPrefix, Routes: dt.Routes()})
	return dt, routeTable(native, e2bAPI, dt)
}

// daytonaUser is the account the Daytona facade's default sandboxes act as:
// Daytona's own, when there is a Daytona template to run.
func daytonaUser(cfg Config) string {
	if cfg.DaytonaTemplate == "" {
		return ""
	}
	return DaytonaUser
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

// validResources refuses resource flags that contradict each other, before
// anything starts.
func validResources(cfg Config) error {
	switch {
	case cfg.DefaultCPU < 0 || cfg.MaxCPU < 0 || cfg.DefaultMemoryMB < 0 || cfg.MaxMemoryMB < 0 ||
		cfg.PidsLimit < 0 || cfg.DiskMB < 0 || cfg.VolumeSizeMB < 0 || cfg.MaxSandboxes < 0 || cfg.MaxConcurrentCreates < 0 || cfg.MaxUploadMB < 0:
		return errors.New("resource flags must not be negative")
	case cfg.AutoPoolMax < 0 || cfg.AutoPoolIdle < 0:
		return fmt.Errorf("--warm-pool-auto-max (%d) and --warm-pool-idle (%s) must not be negative", cfg.AutoPoolMax, cfg.AutoPoolIdle)
	case cfg.MaxCPU > 0 && cfg.DefaultCPU > cfg.MaxCPU:
		return fmt.Errorf("--default-cpu %g exceeds --max-cpu %g", cfg.DefaultCPU, cfg.MaxCPU)
	case cfg.MaxMemoryMB > 0 && cfg.DefaultMemoryMB > cfg.MaxMemoryMB:
		return fmt.Errorf("--default-memory-mb %d exceeds --max-memory-mb %d", cfg.DefaultMemoryMB, cfg.MaxMemoryMB)
	case cfg.DefaultMemoryMB > 0 && cfg.DefaultMemoryMB < 16:
		return errors.New("--default-memory-mb must be at least 16")
	}
	return nil
}

// diskLimit returns the disk limit to apply and how: the engine's quota
// (hard, cfg.DiskMB when the storage driver enforces it), else the disk
// watcher's (cfg.DiskMB measured and enforced by stopping the sandbox),
// saying which in the log and in /v1/status. Without a limit the answer
// also says that what a sandbox writes lands on the engine's disk
// unbounded.
func diskLimit(ctx context.Context, rt *docker.Docker, cfg Config, log *slog.Logger) (hardMB, watchMB int64, st apitypes.DiskStatus) {
	q := rt.DiskQuota(ctx, cfg.DefaultImage)
	const fill = "sandboxes' writable data is not limited: any tenant can fill the host's disk"
	switch {
	case cfg.DiskMB == 0:
		log.Warn("disk: "+fill+" (--disk-mb 0)", "engine", q.Reason)
		return 0, 0, apitypes.DiskStatus{Mode: "none", Enforceable: q.Supported, Warning: fill + " (--disk-mb 0)"}
	case !q.Supported:
		log.Info("disk: limit enforced by the disk watcher: a sandbox whose writable layer passes it is stopped within seconds (the engine cannot enforce a quota)",
			"mb", cfg.DiskMB, "reason", q.Reason, "interval", cfg.DiskWatchInterval)
		return 0, cfg.DiskMB, apitypes.DiskStatus{Mode: "watcher", LimitMB: cfg.DiskMB}
	}
	log.Info("disk: writable layer limited by the engine's quota", "mb", cfg.DiskMB, "engine", q.Reason)
	return cfg.DiskMB, 0, apitypes.DiskStatus{Mode: "quota", Enforceable: true, LimitMB: cfg.DiskMB}
}
