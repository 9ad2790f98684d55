package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// ClaimStore gives the replicated claims the SQLite store's method set
// (ClaimIdempotentRequest and its companions, same arguments, same outcomes),
// so the idempotency engine runs over either unchanged. The now each caller
// passes becomes the log entry's time: every replica decides with it.
type ClaimStore struct{ r *Replica }

// Claims returns the replica's claims as a claim store.
func (r *Replica) Claims() *ClaimStore { return &ClaimStore{r: r} }

// ClaimIdempotentRequest decides cluster-wide whether the caller runs the
// request; see the SQLite store's method of the same name.
func (s *ClaimStore) ClaimIdempotentRequest(ctx context.Context, req sandpit.ClaimRequest, now time.Time) (sandpit.Claim, error) {
	if req.Scope == "" || req.Fingerprint == "" || req.PendingTTL <= 0 {
		return sandpit.Claim{}, fmt.Errorf("claim idempotent request %s/%s: scope, fingerprint and a positive pending TTL are required", req.Scope, req.Fingerprint)
	}
	res, err := s.r.propose(ctx, command{Op: opClaim, At: now.UTC(), Claim: &req, Attempt: newAttempt()})
	if err != nil {
		return sandpit.Claim{}, err
	}
	return res.Claim, res.Err
}

// SetIdempotentTarget records the target of a pending claim's generation.
func (s *ClaimStore) SetIdempotentTarget(ctx context.Context, scope, fingerprint string, generation int64, targetID string, now time.Time) error {
	return s.r.do(ctx, command{Op: opSetTarget, At: now.UTC(), Scope: scope, Fingerprint: fingerprint, Generation: generation, SandboxID: targetID})
}

// CompleteIdempotentRequest turns a pending claim ready with its response.
func (s *ClaimStore) CompleteIdempotentRequest(ctx context.Context, c sandpit.Completion, now time.Time) error {
	if c.ReplayTTL < 0 {
		return fmt.Errorf("complete idempotent request %s/%s: replay TTL must not be negative", c.Scope, c.Fingerprint)
	}
	return s.r.do(ctx, command{Op: opComplete, At: now.UTC(), Completion: &c, Attempt: newAttempt()})
}

// GetIdempotentRequest reads the claim from this node's copy of the index.
// A follower may lag the leader by a few entries; its callers poll, so a
// claim seen pending a moment too long only costs another poll.
func (s *ClaimStore) GetIdempotentRequest(ctx context.Context, scope, fingerprint string) (sandpit.Claim, error) {
	c, ok := s.r.fsm.Claim(scope, fingerprint)
	if !ok {
		return sandpit.Claim{}, fmt.Errorf("get idempotent request %s/%s: %w", scope, fingerprint, sandpit.ErrNotFound)
	}
	return c, nil
}

// DeleteIdempotentRequest removes the claim whatever its state.
func (s *ClaimStore) DeleteIdempotentRequest(ctx context.Context, scope, fingerprint string) error {
	return s.r.do(ctx, command{Op: opAbandon, Scope: scope, Fingerprint: fingerprint})
}

// RenewIdempotentClaim moves a pending claim's lock while its holder still
// works on it; sandpit.ErrClaimLost when it is not pending at generation.
func (s *ClaimStore) RenewIdempotentClaim(ctx context.Context, scope, fingerprint string, generation int64, lockedUntil, now time.Time) error {
	return s.r.do(ctx, command{Op: opRenew, At: now.UTC(), Scope: scope, Fingerprint: fingerprint, Generation: generation, Until: lockedUntil.UTC()})
}
