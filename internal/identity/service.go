package identity

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// Config configures the identity aggregate.
type Config struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time
	// MaxStreamsPerToken bounds the sessions one personal access token
	// holds open at once (0: DefaultMaxStreamsPerToken, below 0: no bound).
	MaxStreamsPerToken int
	// CheckGrants validates and normalises an owner's allow_private_cidrs.
	// The grammar of a grant is the network policy's, which the sandbox
	// aggregate owns; nil accepts the list as given.
	CheckGrants func(list []string) ([]string, error)
}

// Service is the identity aggregate: personal access tokens, owners and
// their limits, the audit log's reading and retention, the long-lived
// sessions each credential holds open, and the SSH keys logins present.
// Every surface authenticates through it; the sandbox aggregate asks it to
// end sessions when a credential of its own (an SSH access token) goes.
type Service struct {
	store       *store.Store
	log         *slog.Logger
	clock       func() time.Time
	checkGrants func([]string) ([]string, error)
	// sessions are the long-lived sessions open per credential, ended
	// when it is revoked or expires.
	sessions *sessions
}

// New builds the identity aggregate.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxStreamsPerToken == 0 {
		cfg.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if cfg.CheckGrants == nil {
		cfg.CheckGrants = func(list []string) ([]string, error) { return list, nil }
	}
	return &Service{store: cfg.Store, log: cfg.Log, clock: cfg.Now, checkGrants: cfg.CheckGrants,
		sessions: newSessions(cfg.MaxStreamsPerToken, cfg.Now)}
}

func (s *Service) now() time.Time { return s.clock().UTC() }

// audit appends an entry for an operation the caller in ctx attempted.
func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	Audit{Store: s.store, Log: s.log, Now: s.now}.Record(ctx, action, resource, opErr)
}

// RequireAdmin refuses a caller that is not an admin.
func RequireAdmin(ctx context.Context) error {
	if !Of(ctx).Admin {
		return fmt.Errorf("%w: admin only", sandpit.ErrForbidden)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}
