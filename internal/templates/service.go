// Package templates is the template aggregate: owners' templates, their
// builds (contexts, logs, the fair build queue, the image janitor), the
// images of snapshots, and the replication of named templates across a
// cluster. It knows nothing of sandboxes beyond the two policies it asks the
// sandbox aggregate for (Policy) and the container a snapshot commits; the
// sandbox aggregate reaches it through the narrow interface it declares.
package templates

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Config is the template aggregate's configuration. Zero values take the
// defaults noted.
type Config struct {
	// Images builds templates' images; nil (unit tests) or an empty
	// TemplateDir (where uploaded build files and build logs are kept)
	// means no builds.
	Images      driver.Images
	TemplateDir string
	// DaemonTemplates are the daemon's own templates (name -> image): an
	// owner's template may not take one of their names.
	DaemonTemplates map[string]string
	// Registry, when set (HOST:PORT), is where built images are pushed and
	// pulled from, so every cluster node can run every template.
	Registry string
	// Build limits: the time one build may take (default 30 minutes), the
	// size of an uploaded context archive (default 512 MiB), and the builds
	// running at once in the daemon (default 2; more wait for a slot) and
	// per owner (default 2; more are refused).
	BuildTimeout      time.Duration
	MaxContextBytes   int64
	MaxBuilds         int
	MaxBuildsPerOwner int
	// BuildLogMax bounds the log one build keeps, in memory and on disk
	// (default 8 MiB); negative means no bound.
	BuildLogMax int64
	// ContextQuota bounds the uploaded build contexts one owner keeps, in
	// bytes (default 2 GiB); negative means no bound.
	ContextQuota int64
	// PidsLimit bounds a build step's processes, as it bounds a sandbox's
	// (default 1024).
	PidsLimit int64
	// Instance and ExtraLabels label the images this daemon makes, so
	// that the janitor matches only its own.
	Instance    string
	ExtraLabels map[string]string
	// Cluster is the replicated index of a clustered daemon, nil on a single
	// node; NodeName is this node's name in it.
	Cluster  *cluster.Replica
	NodeName string
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	Now      func() time.Time
}

// Policy is what the template aggregate asks the sandbox aggregate: a build
// reads only images its owner may run, and its steps run under the limits
// the owner's sandboxes get by default.
type Policy interface {
	// CheckImage refuses an image p may not run in a sandbox.
	CheckImage(p sandpit.Principal, image string) error
	// DefaultResources are the CPU and memory a sandbox of the owner gets
	// when its create names none.
	DefaultResources(l sandpit.OwnerLimits) (cpu float64, memMB int64, err error)
}

// Service is the template aggregate.
type Service struct {
	cfg    Config
	store  *store.Store
	idem   *idempotency.Engine
	bus    *events.Bus
	policy Policy
	log    *slog.Logger
	// cluster is singleNode, or replicated over Config.Cluster.
	cluster templateCluster
	// builds are the template builds running in this process.
	builds *builds
}

// New builds the template aggregate. idem is the one idempotency engine
// (builds of one content are deduplicated through it), bus the event bus
// build events go to.
func New(cfg Config, st *store.Store, idem *idempotency.Engine, bus *events.Bus, policy Policy) *Service {
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = DefaultBuildTimeout
	}
	if cfg.MaxContextBytes <= 0 {
		cfg.MaxContextBytes = DefaultMaxContextBytes
	}
	if cfg.BuildLogMax == 0 {
		cfg.BuildLogMax = DefaultBuildLogMax
	}
	if cfg.ContextQuota == 0 {
		cfg.ContextQuota = DefaultContextQuota
	}
	if cfg.MaxBuilds <= 0 {
		cfg.MaxBuilds = DefaultMaxBuilds
	}
	if cfg.MaxBuildsPerOwner == 0 {
		cfg.MaxBuildsPerOwner = DefaultMaxBuildsPerOwner
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, store: st, idem: idem, bus: bus, policy: policy, log: cfg.Logger,
		cluster: singleNode{}, builds: newBuilds(cfg.MaxBuilds)}
	if cfg.Cluster != nil {
		s.cluster = &replicated{s: s, r: cfg.Cluster}
	}
	return s
}

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// imageLabels are the labels of every image this daemon makes.
func (s *Service) imageLabels() map[string]string {
	return driver.InstanceLabels(s.cfg.ExtraLabels, s.cfg.Instance)
}

// newID returns a random id safe as a DNS label, in the form of a
// sandbox's, which template and build ids carry after their prefix.
func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "sb" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(b[:]), "="))
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

// policyError is a build the operator's policy refuses (403). It is
// sandpit.ErrForbidden to errors.Is, with a message of its own rather than
// the missing-scope one.
type policyError struct{ msg string }

func (e *policyError) Error() string        { return e.msg }
func (e *policyError) Is(target error) bool { return target == sandpit.ErrForbidden }

func policyf(format string, args ...any) error {
	return &policyError{msg: fmt.Sprintf(format, args...)}
}

// audit records an action on a template in the audit log.
func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	identity.Audit{Store: s.store, Log: s.log, Now: s.now}.Record(ctx, action, resource, opErr)
}
