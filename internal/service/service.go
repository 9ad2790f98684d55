// Package service holds Sandpit's domain operations (create a sandbox, expose a
// port, bind a domain, ...) with their rollback chains. It is the only package
// that calls the store, the runtime and the router together; the API layers
// call it and know nothing about SQL or Docker.
package service

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/firewall"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// Sentinel errors of the service layer. The API maps them (and the store's) to
// HTTP statuses in one place: internal/api.
var (
	ErrNotRunning = errors.New("sandbox is not running")
	// ErrPaused and ErrStopped: a call that needs a running sandbox met a
	// paused or a stopped one. Both are ErrNotRunning as well, so a caller
	// that only asks whether the sandbox runs need not tell them apart.
	ErrPaused           error = &notRunningError{"sandbox is paused"}
	ErrStopped          error = &notRunningError{"sandbox is stopped"}
	ErrProtocolConflict       = errors.New("port already exposed with another protocol")
	ErrAgentUnhealthy         = errors.New("sandbox agent did not become healthy")
	ErrRuntime                = errors.New("container runtime failed")
	ErrRouter                 = errors.New("router failed")
	// ErrEngineTimeout: the container engine did not answer within the
	// daemon's engine timeout.
	ErrEngineTimeout = driver.ErrTimeout
	// ErrPortForbidden: the port is neither the agent's nor one the caller
	// may reach (not exposed, or the traffic token is missing or wrong).
	ErrPortForbidden = errors.New("port not reachable")
	// ErrPortInUse: the exposure still carries custom domains.
	ErrPortInUse = errors.New("port has custom domains")
	// ErrDeletedOnStop: the stop succeeded and, the sandbox's auto-delete
	// interval being 0, the sandbox was deleted with it.
	ErrDeletedOnStop = errors.New("sandbox deleted on stop")
)

// notRunningError is a kind of ErrNotRunning with a message of its own.
type notRunningError struct{ msg string }

func (e *notRunningError) Error() string        { return e.msg }
func (e *notRunningError) Is(target error) bool { return target == ErrNotRunning }

// NotRunning is the error of a call that needs a running sandbox and found
// sb in another state: ErrPaused and ErrStopped say what to do about it, any
// other state is plain ErrNotRunning.
func NotRunning(sb sandpit.Sandbox) error {
	switch sb.State {
	case sandpit.StatePaused:
		return fmt.Errorf("%w: resume %s first", ErrPaused, sb.ID)
	case sandpit.StateStopped:
		return fmt.Errorf("%w: start %s first", ErrStopped, sb.ID)
	}
	return fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, sb.ID, sb.State)
}

// Config is the service's configuration. Zero values take the defaults noted.
type Config struct {
	DefaultImage string            // image used when a create names none
	Templates    map[string]string // template/snapshot name -> image
	AgentBinary  string            // host path of the sandpit executable
	// TrustCAFile is the host path of the daemon's egress CA certificate,
	// which every sandbox is made to trust ("" for none).
	TrustCAFile   string
	HealthTimeout time.Duration // default 30s
	PidsLimit     int64         // default 1024
	// DefaultCPU and DefaultMemoryMB apply to a create that names no limit;
	// MaxCPU and MaxMemoryMB bound what a create may ask for (a create above
	// them is refused, not clamped). Zero defaults mean 1 core and 1024 MiB;
	// zero maxima mean the built-in bounds (64 cores, 256 GiB).
	DefaultCPU      float64
	DefaultMemoryMB int64
	MaxCPU          float64
	MaxMemoryMB     int64
	// HostMemoryMB and HostCPUs are what the engine's host has; when known
	// (non-zero) they cap MaxMemoryMB and MaxCPU, so no create is promised
	// more than the machine can give.
	HostMemoryMB int64
	HostCPUs     float64
	// AllowImages are glob patterns (path.Match) of the images a non-admin
	// owner may run besides the templates' images and the default image,
	// which are always allowed.
	AllowImages []string
	// DiskMB limits each sandbox's writable layer when the engine can
	// enforce it (DiskQuota reports so); 0 means no limit.
	DiskMB int64
	// DiskWatchMB is the disk limit the watcher enforces where the engine
	// cannot (DiskMB is then 0): a running sandbox whose writable layer
	// passes it is stopped with ReasonDiskLimit. 0 means no watcher.
	DiskWatchMB int64
	// MaxSandboxes caps how many sandboxes the daemon holds (any state);
	// a create beyond it fails with sandpit.ErrQuotaExceeded. 0 = no cap.
	MaxSandboxes int
	// MaxConcurrentCreates bounds creates in progress at once; the others
	// wait their turn (default 8).
	MaxConcurrentCreates int
	// Runtime is the OCI runtime containers run under ("" = the engine's
	// default, runc).
	Runtime string
	// Checkpoints, when set (a runtime that can checkpoint: runsc with
	// its own network stack), makes a memory pause write the sandbox's
	// processes into CheckpointDir and stop its container, instead of
	// freezing them in place.
	Checkpoints   driver.Checkpointer
	CheckpointDir string
	Domain        string // default "localhost"
	ProxyPort     int    // port of the proxy, for URLs; 80 (443 with TLS) omits it
	PublicHost    string // host in tcp:// URLs; default 127.0.0.1
	// Domains is the policy on custom hostnames (reserved names, the
	// suffixes owners may bind, the ownership proof).
	Domains     DomainPolicy
	PortRange   sandpit.PortRange // TCP host-port pool
	ExtraLabels map[string]string // added to every container (tests tag runs)
	// Instance identifies this daemon's containers (label sandpit.instance):
	// reconcile touches only those, so daemons can share an engine.
	Instance string
	// Firewall, when set, holds each sandbox's network policy; nil leaves
	// sandboxes to the engine's network as it is (unit tests).
	Firewall *firewall.Firewall
	// Egress, when set, enforces the rules on names of the sandboxes that
	// have them (the firewall sends it their web and DNS traffic).
	Egress *egress.Server
	// EgressProfiles are the operator's named domain lists a policy may
	// name (pypi, npm, github ...).
	EgressProfiles map[string][]string
	// PreviewTLS makes preview and custom-domain URLs https:// (the Caddy
	// router serving them with on-demand certificates).
	PreviewTLS bool
	// RestartParallel bounds the sandboxes a start brings back at once
	// (default 8).
	RestartParallel int
	// IntervalUnit is the length of one unit of the lifecycle intervals
	// (auto-stop, auto-archive, auto-delete); default one minute. Only
	// tests shorten it.
	IntervalUnit time.Duration
	// Metrics counts creates and idempotency outcomes; nil counts nothing.
	Metrics *metrics.Metrics
	// Cluster is the replicated index of a clustered daemon, nil on a single
	// node; NodeName is this node's name in it.
	Cluster  *cluster.Replica
	NodeName string
	// RecreateGiveUp is how long this node keeps retrying the re-creation
	// of a dead node's sandbox before it gives up and the sandbox becomes
	// lost (default two minutes).
	RecreateGiveUp time.Duration
	// WarmPool lists the pools of started sandboxes kept for creates to
	// adopt; PoolRefillConcurrency bounds how many pooled containers are
	// made at once (default 1).
	WarmPool              []PoolSpec
	PoolRefillConcurrency int
	// PoolAuto sizes pools from demand for the images no pin names.
	PoolAuto PoolAuto
	Logger   *slog.Logger
	Now      func() time.Time

	// LateTemplates are daemon templates (name -> image) whose image did
	// not exist at start; each is served once the engine has its image
	// (WatchLateTemplates), so the daemon does not wait for a long build.
	LateTemplates map[string]string
	// ImageBuildDir is where the image build scripts record the progress
	// of a build (scripts/lib/image-build.sh, their SANDPIT_CACHE_DIR): a
	// create of a late template whose image is being built waits for it,
	// and the daemon's status and log say where the build is. Empty: no
	// build is ever seen, and such a create fails at once.
	ImageBuildDir string
	// Images commits archived sandboxes and reads the start commands
	// images declare (imageStart); nil (unit tests) does neither.
	Images driver.Images
	// Volumes makes the engine's named volumes; nil means no volumes.
	Volumes driver.Volumes
	// VolumeSizeMB is the size of a volume whose create names none and the
	// most one may name; the disk watcher stops a sandbox writing into a
	// volume past its size. 0 means volumes are unbounded.
	VolumeSizeMB int64
	// ReadyTimeout bounds how long a create waits for a template's ready
	// command (default 2 minutes).
	ReadyTimeout time.Duration

	// MaxStreamsPerToken bounds the sessions (event streams, sockets,
	// terminals, interpreter runs) one personal access token holds open at
	// once; 0 means identity.DefaultMaxStreamsPerToken, negative means no bound.
	MaxStreamsPerToken int
}

// Service is Sandpit's domain layer.
type Service struct {
	cfg    Config
	late   *lateTemplates
	store  *store.Store
	rt     driver.Driver
	router router.Router
	log    *slog.Logger
	// agents carries every call the daemon makes to sandbox agents.
	agents *agentapi.Link
	// agentClients are the Connect clients of each agent address, built on
	// first use; guarded by mu and dropped with the address.
	agentClients map[string]agentapi.Clients

	// ips caches each running sandbox's container address so the hot paths
	// (proxying, exec) do not inspect the container on every request. It is
	// dropped whenever the container is started, stopped or removed.
	mu  sync.Mutex
	ips map[string]string
	// creating holds, for each sandbox this process is creating, a channel
	// closed when that create returns.
	creating map[string]chan struct{}
	// touched is when each sandbox's activity was last written to the
	// store, so that a burst of toolbox calls costs one write, not one per
	// call. Guarded by mu.
	touched map[string]time.Time
	// leaving holds the sandboxes whose container is being stopped or
	// removed. Their agent is going away, so requests for them are refused
	// at once instead of being sent to an address that stops answering
	// (which costs the caller seconds of connect timeout).
	leaving map[string]bool
	// starting holds the running sandboxes reconcile is still bringing back.
	starting map[string]bool
	// unchecked holds the sandboxes the previous process left whose rows
	// reconcile has not compared with their containers yet (see
	// StartReconcile); checked is closed once none is left. Guarded by mu.
	unchecked map[string]bool
	checked   chan struct{}
	// reconcileCtx is the context StartReconcile was given, which the
	// restarts an on-demand check starts run under. Guarded by mu.
	reconcileCtx context.Context

	idem *idempotency.Engine
	// cluster is singleNode, or replicated over Config.Cluster.
	cluster clusterMode
	bus     *events.Bus

	// exposing coordinates the calls exposing one route key; see
	// ExposePort.
	exposing keyedExposures
	// locks serialise the lifecycle operations of each sandbox.
	locks keyedLocks
	// codeCtx names the code interpreter contexts of each sandbox.
	codeCtx codeContexts
	// bg tracks background work: reconcile's restarts, event handling.
	bg sync.WaitGroup

	// creates is a semaphore bounding creates in progress: each holds a
	// slot from before its row is inserted until it returns.
	creates chan struct{}

	// pool is the warm pool, without specs when none is configured.
	pool *warmPool
	// ckpt is the memory pause that checkpoints (checkpoint.go); without
	// a Checkpointer memory pauses freeze.
	ckpt *checkpoints

	// recreateFailing is, per sandbox this node fails to re-create, when
	// its first failed attempt was; guarded by mu.
	recreateFailing map[string]time.Time

	// tpl is the template aggregate (noTemplates until UseTemplates).
	tpl TemplateResolver
	// snapshots serialises the commits of each sandbox (snapshots.go).
	snapshots snapshotState

	// ids is the identity aggregate: the sessions the SSH access tokens
	// made here end through it.
	ids *identity.Service
	// vols is the volumes aggregate; mounts is the port a create resolves
	// its volumes through (vols, unless a test swaps it).
	vols   *volumes.Service
	mounts Mounter
}

// New builds a Service.
func New(cfg Config, st *store.Store, rt driver.Driver, rtr router.Router) *Service {
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 30 * time.Second
	}
	if cfg.RecreateGiveUp <= 0 {
		cfg.RecreateGiveUp = 2 * time.Minute
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = 1024
	}
	if cfg.DefaultCPU <= 0 {
		cfg.DefaultCPU = DefaultCPU
	}
	if cfg.DefaultMemoryMB <= 0 {
		cfg.DefaultMemoryMB = DefaultMemoryMB
	}
	if cfg.MaxCPU <= 0 || cfg.MaxCPU > maxCPU {
		cfg.MaxCPU = maxCPU
	}
	if cfg.MaxMemoryMB <= 0 || cfg.MaxMemoryMB > maxMemoryMB {
		cfg.MaxMemoryMB = maxMemoryMB
	}
	if cfg.HostMemoryMB > 0 && cfg.MaxMemoryMB > cfg.HostMemoryMB {
		cfg.MaxMemoryMB = cfg.HostMemoryMB
	}
	if cfg.HostCPUs > 0 && cfg.MaxCPU > cfg.HostCPUs {
		cfg.MaxCPU = cfg.HostCPUs
	}
	if cfg.MaxConcurrentCreates <= 0 {
		cfg.MaxConcurrentCreates = 8
	}
	if cfg.Domain == "" {
		cfg.Domain = "localhost"
	}
	if cfg.PublicHost == "" {
		cfg.PublicHost = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Templates == nil {
		cfg.Templates = map[string]string{}
	}
	if cfg.IntervalUnit <= 0 {
		cfg.IntervalUnit = time.Minute
	}
	var specs []PoolSpec
	if len(cfg.WarmPool) > 0 {
		// A pool without limits of its own takes the defaults a create
		// naming none gets, so that such a create adopts without a live
		// update.
		specs = make([]PoolSpec, len(cfg.WarmPool))
		for i, p := range cfg.WarmPool {
			if p.CPU <= 0 {
				p.CPU = min(cfg.DefaultCPU, cfg.MaxCPU)
			}
			if p.MemoryMB <= 0 {
				p.MemoryMB = min(cfg.DefaultMemoryMB, cfg.MaxMemoryMB)
			}
			specs[i] = p
		}
		cfg.WarmPool = specs
	}
	if cfg.PoolAuto.Max <= 0 {
		cfg.PoolAuto.Max = DefaultPoolAutoMax
	}
	if cfg.PoolAuto.Total <= 0 {
		cfg.PoolAuto.Total = DefaultPoolAutoTotal
	}
	if cfg.PoolAuto.Idle <= 0 {
		cfg.PoolAuto.Idle = DefaultPoolAutoIdle
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.MaxStreamsPerToken == 0 {
		cfg.MaxStreamsPerToken = identity.DefaultMaxStreamsPerToken
	}
	idem := idempotency.New(claimStore(cfg, st), cfg.Now, cfg.Logger, cfg.Metrics)
	s := &Service{
		late:            newLateTemplates(cfg.LateTemplates, cfg.ImageBuildDir, cfg.Images, cfg.Logger),
		cluster:         singleNode{},
		cfg:             cfg,
		store:           st,
		rt:              rt,
		router:          rtr,
		log:             cfg.Logger,
		agents:          agentapi.NewLink(),
		agentClients:    map[string]agentapi.Clients{},
		ips:             map[string]string{},
		touched:         map[string]time.Time{},
		creating:        map[string]chan struct{}{},
		leaving:         map[string]bool{},
		starting:        map[string]bool{},
		unchecked:       map[string]bool{},
		checked:         closedChan(),
		reconcileCtx:    context.Background(),
		recreateFailing: map[string]time.Time{},
		idem:            idem,
		tpl:             noTemplates{},
		bus:             events.NewBus(),
		creates:         make(chan struct{}, cfg.MaxConcurrentCreates),
	}
	s.pool = newWarmPool(s, specs, cfg.PoolRefillConcurrency)
	s.ckpt = &checkpoints{svc: s, log: s.log, ck: cfg.Checkpoints, dir: cfg.CheckpointDir}
	if cfg.Cluster != nil {
		s.cluster = &replicated{s: s, r: cfg.Cluster}
	}
	s.ids = identity.New(identity.Config{Store: st, Log: cfg.Logger, Now: cfg.Now, MaxStreamsPerToken: cfg.MaxStreamsPerToken,
		CheckGrants: normalizeGrants})
	s.vols = volumes.New(volumes.Config{Store: st, Engine: cfg.Volumes, Log: cfg.Logger, Now: cfg.Now, SizeMB: cfg.VolumeSizeMB,
		Instance: cfg.Instance, ExtraLabels: cfg.ExtraLabels, EngineError: runtimeErr})
	s.mounts = s.vols
	return s
}

// Idempotency returns the idempotency engine every surface deduplicates
// through.
func (s *Service) Idempotency() *idempotency.Engine { return s.idem }

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// NewSandboxID returns a random id that is safe as a DNS label (lower-case
// base32), since ids appear in preview hostnames.
func NewSandboxID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "sb" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(b[:]), "="))
}

// DeriveSandboxID maps a deterministic seed (a request fingerprint and claim
// generation) to a sandbox id, so a retry of a crashed attempt picks the very
// id the first attempt used.
func DeriveSandboxID(seed []byte) string {
	if len(seed) > 12 {
		seed = seed[:12]
	}
	return "sb" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(seed), "="))
}

func newToken() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

func containerName(id string) string { return "sandpit-" + id }

// sandboxContainerName is the name of a sandbox's container. In a cluster
// it carries this node's instance id too: nodes may share one engine, and a
// sandbox re-created on one node must not collide with the container its
// dead owner left behind.
func (s *Service) sandboxContainerName(id string) string {
	if s.cluster.clustered() && s.cfg.Instance != "" {
		return containerName(id) + "-" + s.cfg.Instance[:min(8, len(s.cfg.Instance))]
	}
	return containerName(id)
}

// AgentAddr returns "ip:49983" of a running sandbox's agent.
func (s *Service) AgentAddr(ctx context.Context, id string) (string, error) {
	ip, err := s.sandboxIP(ctx, id)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip, strconv.Itoa(agentapi.Port)), nil
}

func (s *Service) sandboxIP(ctx context.Context, id string) (string, error) {
	s.mu.Lock()
	ip, ok := s.ips[id]
	leaving := s.leaving[id]
	unchecked := s.unchecked[id]
	s.mu.Unlock()
	if unchecked {
		// A sandbox not yet checked since the restart may have lost its
		// container or its firewall rules: its check comes first.
		if err := s.ensureChecked(ctx, id); err != nil {
			return "", err
		}
		return s.sandboxIP(ctx, id)
	}
	if leaving {
		return "", fmt.Errorf("%w: sandbox %s is going away", ErrNotRunning, id)
	}
	// A frozen container keeps its address, but a call sent there would
	// wait for as long as the sandbox stays paused: a paused row is
	// answered from its state instead (the check is in memory).
	if ok && !s.store.SandboxPaused(id) {
		return ip, nil
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return "", err
	}
	// A paused sandbox's resume reads its address from the engine itself
	// (routesAfterUnpause), so a call here needs a running sandbox.
	if sb.State != sandpit.StateRunning {
		return "", NotRunning(sb)
	}
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	if err != nil {
		return "", runtimeErr("inspect "+id, err)
	}
	if c.IP == "" {
		return "", fmt.Errorf("%w: sandbox %s has no address", ErrNotRunning, id)
	}
	s.mu.Lock()
	if s.leaving[id] {
		s.mu.Unlock()
		return "", fmt.Errorf("%w: sandbox %s is going away", ErrNotRunning, id)
	}
	s.ips[id] = c.IP
	s.mu.Unlock()
	return c.IP, nil
}

func (s *Service) forgetIP(id string) {
	s.mu.Lock()
	if ip, ok := s.ips[id]; ok {
		delete(s.agentClients, net.JoinHostPort(ip, strconv.Itoa(agentapi.Port)))
	}
	delete(s.ips, id)
	s.mu.Unlock()
	// The container's kernels went with it.
	s.codeCtx.forget(id)
	// A kept-alive connection to a container that went away is never reset
	// (its network namespace is gone), and the engine hands its address to
	// the next container: reusing it would reach that one, or get a reset.
	// Idle connections are cheap to remake, so all of them go.
	s.agents.CloseIdleConnections()
}

// leave marks a sandbox's agent as going away (see Service.leaving) until
// the returned function is called.
func (s *Service) leave(id string) (done func()) {
	s.mu.Lock()
	s.leaving[id] = true
	delete(s.ips, id)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.leaving, id)
		s.mu.Unlock()
	}
}

// Agent readiness polling. An agent is usually ready 20-40 ms after its
// container starts; a back-off from the first attempt overshoots that by up to
// its last interval (about 10 ms at 5/10/20 ms), which is a quarter of a cold
// create. An attempt against an agent that is not listening yet is a refused
// connection, a few microseconds of work, so the first healthFastWindow polls
// every healthFastDelay and only a slow agent (a loaded engine, gVisor) gets
// the back-off.
const (
	healthFastWindow = 100 * time.Millisecond
	healthFastDelay  = time.Millisecond
	healthMaxDelay   = 100 * time.Millisecond
)

// healthDelay is the wait before the next readiness attempt, given how long
// the wait has lasted and the previous delay.
func healthDelay(elapsed, prev time.Duration) time.Duration {
	if elapsed < healthFastWindow {
		return healthFastDelay
	}
	return min(max(2*prev, 5*time.Millisecond), healthMaxDelay)
}

// waitHealthy polls the agent's /health until it answers or the budget ends.
func (s *Service) waitHealthy(ctx context.Context, ip string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
	defer cancel()
	start := time.Now()
	var delay time.Duration
	for {
		if s.agents.Healthy(ctx, ip) {
			return nil
		}
		delay = healthDelay(time.Since(start), delay)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w within %s", ErrAgentUnhealthy, s.cfg.HealthTimeout)
		case <-time.After(delay):
		}
	}
}

// AgentTarget returns the address and access token of a running sandbox's
// agent, for the API layers that proxy the agent protocol.
func (s *Service) AgentTarget(ctx context.Context, id string) (addr, token string, err error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return "", "", err
	}
	if sb.State == sandpit.StatePaused && sb.AutoResume {
		// A sandbox made to wake on traffic wakes for a call too, which
		// waits for the resume; one without answers ErrPaused at once.
		if _, err := s.WakeOnTraffic(ctx, id); err != nil {
			return "", "", err
		}
	}
	addr, err = s.AgentAddr(ctx, id)
	if err != nil {
		return "", "", err
	}
	return addr, sb.AccessToken, nil
}
