package identity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// DefaultMaxStreamsPerToken is how many sessions one personal access token
// may hold open at once unless the operator says otherwise.
const DefaultMaxStreamsPerToken = 64

var (
	// ErrTooManyStreams refuses a session beyond the token's cap. It is a
	// quota, answered 429.
	ErrTooManyStreams = fmt.Errorf("too many open streams for this token: %w", sandpit.ErrQuotaExceeded)
	// ErrTokenRevoked and ErrTokenExpired are why a session ended (the
	// cause of its context).
	ErrTokenRevoked = errors.New("the token was revoked")
	ErrTokenExpired = errors.New("the token expired")
)

// sessions is the registry of the long-lived sessions open per personal
// access token: event streams, event sockets, terminals and interpreter
// runs. Authentication happens once, when a session opens, so without the
// registry a revoked or expired token would keep every session it had
// opened. Each session's context is cancelled, with ErrTokenRevoked or
// ErrTokenExpired as its cause, when its token is revoked (RevokeToken calls
// revoke before it returns) or when the token's expiry passes (a timer per
// token with sessions open).
type sessions struct {
	max int
	now func() time.Time

	mu      sync.Mutex
	byToken map[string]*tokenSessions
	// revoked remembers the prefixes revoked while this process runs, so
	// that a request authenticated just before the revocation cannot open
	// a session just after it. Tokens are few (an admin makes each one),
	// so the set stays small.
	revoked map[string]bool
}

type tokenSessions struct {
	open  map[*session]struct{}
	timer *time.Timer // fires at the token's expiry; nil if it has none
}

type session struct {
	cancel context.CancelCauseFunc
}

func newSessions(max int, now func() time.Time) *sessions {
	return &sessions{max: max, now: now, byToken: map[string]*tokenSessions{}, revoked: map[string]bool{}}
}

// OpenSession registers a long-lived session of the request ctx belongs to
// and returns the context the session must run under, and the release to
// call when it ends. That context ends when ctx does, or when the token the
// request authenticated with is revoked or expires; every surface's stream
// stops writing once it has ended. A token holding its cap of sessions gets
// ErrTooManyStreams. The daemon's own token is not registered (it can be
// neither revoked nor expired, and is the operator's).
//
// A nil Service (a facade's unit tests, which authenticate the admin token
// only) registers nothing.
func (s *Service) OpenSession(ctx context.Context) (context.Context, func(), error) {
	if s == nil {
		return ctx, func() {}, nil
	}
	return s.sessions.open(ctx, Of(ctx))
}

// OpenSessions is how many sessions the token with this prefix holds open.
func (s *Service) OpenSessions(prefix string) int {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	if ts := s.sessions.byToken[prefix]; ts != nil {
		return len(ts.open)
	}
	return 0
}

func (r *sessions) open(ctx context.Context, p sandpit.Principal) (context.Context, func(), error) {
	if p.TokenPrefix == "" {
		return ctx, func() {}, nil
	}
	now := r.now()
	if !p.ExpiresAt.IsZero() && !now.Before(p.ExpiresAt) {
		return nil, nil, fmt.Errorf("%w: token expired", sandpit.ErrUnauthorized)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked[p.TokenPrefix] {
		return nil, nil, fmt.Errorf("%w: token revoked", sandpit.ErrUnauthorized)
	}
	ts := r.byToken[p.TokenPrefix]
	if ts == nil {
		ts = &tokenSessions{open: map[*session]struct{}{}}
		r.byToken[p.TokenPrefix] = ts
	}
	if r.max > 0 && len(ts.open) >= r.max {
		if len(ts.open) == 0 {
			delete(r.byToken, p.TokenPrefix)
		}
		return nil, nil, fmt.Errorf("%w (at most %d)", ErrTooManyStreams, r.max)
	}
	if ts.timer == nil && !p.ExpiresAt.IsZero() {
		prefix := p.TokenPrefix
		ts.timer = time.AfterFunc(p.ExpiresAt.Sub(now), func() { r.end(prefix, ErrTokenExpired, false) })
	}
	sctx, cancel := context.WithCancelCause(ctx)
	sess := &session{cancel: cancel}
	ts.open[sess] = struct{}{}
	var once sync.Once
	release := func() {
		once.Do(func() {
			r.mu.Lock()
			if cur := r.byToken[p.TokenPrefix]; cur == ts {
				delete(ts.open, sess)
				if len(ts.open) == 0 {
					if ts.timer != nil {
						ts.timer.Stop()
					}
					delete(r.byToken, p.TokenPrefix)
				}
			}
			r.mu.Unlock()
			cancel(context.Canceled)
		})
	}
	return sctx, release, nil
}

// revoke ends every session of the token and refuses new ones.
func (r *sessions) revoke(prefix string) { r.end(prefix, ErrTokenRevoked, true) }

// end cancels every session of the token with cause; revoked also refuses
// the token's future sessions.
func (r *sessions) end(prefix string, cause error, revoked bool) {
	r.mu.Lock()
	if revoked {
		r.revoked[prefix] = true
	}
	ts := r.byToken[prefix]
	delete(r.byToken, prefix)
	r.mu.Unlock()
	if ts == nil {
		return
	}
	if ts.timer != nil {
		ts.timer.Stop()
	}
	for sess := range ts.open {
		sess.cancel(cause)
	}
}

// EndSessions ends every session registered under key with cause; the
// credential itself stays usable for new ones. The sandbox aggregate ends
// the sessions of the SSH access tokens it removes this way (see
// SSHSession).
func (s *Service) EndSessions(key string, cause error) { s.sessions.end(key, cause, false) }
