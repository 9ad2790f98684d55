// Package idempotency is the one idempotency engine: it claims, waits for,
// replays, completes and abandons deduplicated operations over a ClaimStore
// (the SQLite store on a single node, the replicated index in a cluster). It
// knows nothing of sandboxes; every surface runs its deduplicated
// operations through Engine.Do. It imports the domain types, the store (for
// the single-node ClaimStore) and metrics only.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Errors of the idempotency engine; the API layers map them to statuses.
var (
	// ErrKeyMismatch: the key was already used for a request with another
	// hash, and that earlier request still binds it.
	ErrKeyMismatch = errors.New("idempotency key already used for a different request")
	// ErrKeyInFlight: the first attempt is still running and the duplicate
	// ran out of its wait budget.
	ErrKeyInFlight = errors.New("a request with this idempotency key is still in progress")
)

// ClaimStore is the storage of idempotency claims. The SQLite store is the
// implementation today; a replicated store for a cluster implements the same
// contract (see store.ClaimIdempotentRequest for the semantics of each call),
// and nothing above the engine changes.
type ClaimStore interface {
	ClaimIdempotentRequest(ctx context.Context, req sandpit.ClaimRequest, now time.Time) (sandpit.Claim, error)
	SetIdempotentTarget(ctx context.Context, scope, fingerprint string, generation int64, targetID string, now time.Time) error
	CompleteIdempotentRequest(ctx context.Context, c sandpit.Completion, now time.Time) error
	GetIdempotentRequest(ctx context.Context, scope, fingerprint string) (sandpit.Claim, error)
	DeleteIdempotentRequest(ctx context.Context, scope, fingerprint string) error
	RenewIdempotentClaim(ctx context.Context, scope, fingerprint string, generation int64, lockedUntil, now time.Time) error
}

var _ ClaimStore = (*store.Store)(nil)

// Request names one idempotent operation and how long it may take.
type Request struct {
	Scope string
	Key   string
	// RequestHash, when set, must match the hash the key was first used
	// with; otherwise Do fails with ErrKeyMismatch.
	RequestHash string
	// PendingTTL is how long an attempt holds the key before a duplicate may
	// take it over as stalled.
	PendingTTL time.Duration
	// Wait bounds how long a duplicate waits for the first attempt before Do
	// fails with ErrKeyInFlight.
	Wait time.Duration
	// ReplayTTL is how long a completed response is replayed.
	ReplayTTL time.Duration
}

// Response is what an attempt answered: the stored and replayed outcome.
type Response struct {
	Status   int
	Body     []byte
	TargetID string // the resource the attempt made or chose, if any
}

// Attempt is the caller's handle on an acquired claim.
type Attempt struct {
	e *Engine
	k claimKey
	// Generation is the claim's generation (see sandpit.Claim).
	Generation int64
	// TargetID is the resource id an earlier, interrupted attempt of this
	// generation recorded: the attempt is a resumption and must reuse it.
	TargetID string
}

// Key returns the claim's key (the fingerprint).
func (a *Attempt) Key() string { return a.k.key }

// Resumed reports whether an earlier attempt of this claim recorded a target.
func (a *Attempt) Resumed() bool { return a.TargetID != "" }

// SetTarget records the resource id before the resource is made, so whoever
// takes a crashed attempt over reuses it instead of making a second one.
func (a *Attempt) SetTarget(ctx context.Context, id string) error {
	if err := a.e.st.SetIdempotentTarget(ctx, a.k.scope, a.k.key, a.Generation, id, a.e.now()); err != nil {
		return err
	}
	a.TargetID = id
	return nil
}

// Outcome says how Do answered.
type Outcome int

const (
	// Executed: this call ran the operation.
	Executed Outcome = iota + 1
	// Replayed: an earlier attempt's stored response was returned.
	Replayed
)

// Engine is the one idempotency engine: claim, wait, replay, complete
// and abandon over a ClaimStore. Every surface (the /v1 Idempotency-Key,
// E2B's create fingerprint) runs its deduplicated operations through Do.
//
// A duplicate that finds the key in flight waits for it. When the attempt
// runs in this process the duplicate is woken the moment it completes or is
// abandoned; only a claim held by another process (which this one cannot
// observe finishing) is polled.
type Engine struct {
	st  ClaimStore
	now func() time.Time
	log *slog.Logger
	// metrics counts claim outcomes per base scope; nil counts nothing.
	metrics *metrics.Metrics

	mu sync.Mutex
	// held counts the attempts of each key running in this process.
	held map[claimKey]int
	// done is closed, and removed, when an attempt of the key ends.
	done map[claimKey]*ending
}

// ending is how an in-process attempt's waiters learn that it ended: ch is
// closed then, and claim is the completed claim when the attempt completed,
// so a storm of waiters replays it without each reading the store.
type ending struct {
	ch    chan struct{}
	claim *sandpit.Claim
}

type claimKey struct{ scope, key string }

// ownerScopeSep separates a claim scope's base from its owner.
const ownerScopeSep = "@owner:"

// OwnerScope is the claim scope of base for owner: metrics count under the
// base, claims are kept per owner.
func OwnerScope(base, owner string) string { return base + ownerScopeSep + owner }

// New builds the engine over st; m counts its claim outcomes (nil counts
// nothing).
func New(st ClaimStore, now func() time.Time, log *slog.Logger, m *metrics.Metrics) *Engine {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Engine{st: st, metrics: m, now: func() time.Time { return now().UTC() }, log: log,
		held: map[claimKey]int{}, done: map[claimKey]*ending{}}
}

// Lookup returns the answer recorded for (scope, key) while it may still be
// replayed; found is false when there is none (never made, pending,
// forgotten or past its window). A surface uses it to read back what an
// earlier request of its own recorded, from any process of the cluster.
func (e *Engine) Lookup(ctx context.Context, scope, key string) (resp Response, found bool, err error) {
	c, err := e.st.GetIdempotentRequest(ctx, scope, key)
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
		return Response{}, false, nil
	case err != nil:
		return Response{}, false, err
	case c.State != "ready" || (!c.ReplayUntil.IsZero() && e.now().After(c.ReplayUntil)):
		return Response{}, false, nil
	}
	return Response{Status: c.ResponseStatus, Body: c.ResponseBody, TargetID: c.TargetID}, true, nil
}

// Forget removes what is recorded for (scope, key): the next request of
// that key is new work. A surface calls it when the work a recorded answer
// describes has moved on (E2B's requested build has started).
func (e *Engine) Forget(ctx context.Context, scope, key string) error {
	return e.st.DeleteIdempotentRequest(ctx, scope, key)
}

// Poll bounds of a wait on a claim held by another process.
const (
	pollMin = 10 * time.Millisecond
	pollMax = 250 * time.Millisecond
)

// Do runs op at most once per (Scope, Key) within the replay window:
//
//   - the first caller acquires the claim and runs op. A response below 500
//     is completed (stored for replay); an error or a 5xx abandons the claim,
//     since every failing path has undone its effects and a retry may well
//     succeed;
//   - a duplicate within the replay window gets the stored response;
//   - a duplicate while the first is running waits for it, then replays its
//     response, or claims again if it was abandoned or went stale;
//   - a key reused with another request hash fails with ErrKeyMismatch.
//
// op's error is returned as is, with the zero Response.
func (e *Engine) Do(ctx context.Context, req Request, op func(context.Context, *Attempt) (Response, error)) (Response, Outcome, error) {
	k := claimKey{req.Scope, req.Key}
	start := time.Now()
	deadline := start.Add(req.Wait)
	// Metrics name the scope without its owner: one series per operation,
	// not per tenant.
	base, _, _ := strings.Cut(req.Scope, ownerScopeSep)
	for {
		claim, err := e.st.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{
			Scope: req.Scope, Fingerprint: req.Key, RequestHash: req.RequestHash, PendingTTL: req.PendingTTL,
		}, e.now())
		if err != nil {
			return Response{}, 0, err
		}
		switch claim.Outcome {
		case sandpit.Mismatch:
			e.metrics.IdemOutcome(base, metrics.IdemMismatch)
			return Response{}, 0, ErrKeyMismatch
		case sandpit.Replay:
			e.metrics.IdemOutcome(base, metrics.IdemReplay)
			e.metrics.IdemAnswered(base, metrics.PathReplayed, time.Since(start))
			return stored(claim), Replayed, nil
		case sandpit.Acquired:
			e.metrics.IdemOutcome(base, metrics.IdemAcquired)
			resp, err := e.run(ctx, k, req, claim, op)
			return resp, Executed, err
		case sandpit.InFlight:
			e.metrics.IdemOutcome(base, metrics.IdemInFlight)
			done, ready, err := e.await(ctx, k, deadline)
			if err != nil {
				return Response{}, 0, err
			}
			if ready {
				e.metrics.IdemAnswered(base, metrics.PathDeduplicated, time.Since(start))
				return stored(done), Replayed, nil
			}
			if !time.Now().Before(deadline) {
				return Response{}, 0, ErrKeyInFlight
			}
			// The first attempt was abandoned or went stale: claim again.
		default:
			return Response{}, 0, fmt.Errorf("unexpected claim outcome %v", claim.Outcome)
		}
	}
}

func stored(c sandpit.Claim) Response {
	return Response{Status: c.ResponseStatus, Body: c.ResponseBody, TargetID: c.TargetID}
}

// run executes op under an acquired claim and completes or abandons it.
func (e *Engine) run(ctx context.Context, k claimKey, req Request, claim sandpit.Claim, op func(context.Context, *Attempt) (Response, error)) (Response, error) {
	e.mu.Lock()
	e.held[k]++
	e.mu.Unlock()
	var completed *sandpit.Claim
	defer func() { e.release(k, completed) }()

	// The bookkeeping after op outlives the caller's cancellation: a claim
	// left pending would make every retry wait out its lock.
	bg := context.WithoutCancel(ctx)
	a := &Attempt{e: e, k: k, Generation: claim.Generation, TargetID: claim.TargetID}
	stopRenew := e.renew(bg, k, claim.Generation, req.PendingTTL)
	resp, err := op(ctx, a)
	stopRenew()
	// Server-side failures and a full quota (429) are not recorded: the
	// request may well succeed when retried, and every failing path has
	// already undone its effects.
	if err != nil || resp.Status >= 500 || resp.Status == http.StatusTooManyRequests {
		if derr := e.st.DeleteIdempotentRequest(bg, k.scope, k.key); derr != nil {
			e.log.Error("abandon idempotency claim", "scope", k.scope, "err", derr)
		}
		return resp, err
	}
	if resp.TargetID == "" {
		resp.TargetID = a.TargetID
	}
	err = e.st.CompleteIdempotentRequest(bg, sandpit.Completion{
		Scope: k.scope, Fingerprint: k.key, Generation: claim.Generation, TargetID: resp.TargetID,
		ResponseStatus: resp.Status, ResponseBody: resp.Body, ReplayTTL: req.ReplayTTL,
	}, e.now())
	if err == nil {
		completed = &sandpit.Claim{Scope: k.scope, Fingerprint: k.key, Generation: claim.Generation, State: "ready",
			TargetID: resp.TargetID, ResponseStatus: resp.Status, ResponseBody: resp.Body}
	} else {
		// The work is done and this is its answer. A duplicate that took the
		// claim over (same generation, same target) completes it, or a later
		// one adopts the target; nothing is made twice.
		e.log.Error("complete idempotency claim", "scope", k.scope, "err", err)
	}
	return resp, nil
}

// renew keeps the claim's lock ahead of its expiry while op runs (a delete
// waiting on a slow engine, a create awaiting its agent): without it, a retry
// arriving after the pending TTL would take the claim over and run the
// request a second time. The returned function stops the renewal.
func (e *Engine) renew(ctx context.Context, k claimKey, generation int64, ttl time.Duration) func() {
	if ttl <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(ttl/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				now := e.now()
				if err := e.st.RenewIdempotentClaim(ctx, k.scope, k.key, generation, now.Add(ttl), now); err != nil {
					if ctx.Err() == nil {
						e.log.Warn("renew idempotency claim", "scope", k.scope, "err", err)
					}
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// release ends one in-process attempt of k and wakes its waiters, handing
// them the completed claim (nil when the attempt was abandoned or its
// completion failed: they read the store again).
func (e *Engine) release(k claimKey, completed *sandpit.Claim) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held[k]--; e.held[k] <= 0 {
		delete(e.held, k)
	}
	if end, ok := e.done[k]; ok {
		end.claim = completed
		close(end.ch)
		delete(e.done, k)
	}
}

// subscribe returns the ending of the current in-process attempt of k, and
// whether such an attempt runs in this process at all. Without one the ending
// is nil: nothing here would ever signal it.
func (e *Engine) subscribe(k claimKey) (*ending, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held[k] == 0 {
		return nil, false
	}
	end, ok := e.done[k]
	if !ok {
		end = &ending{ch: make(chan struct{})}
		e.done[k] = end
	}
	return end, true
}

// await waits for an in-flight claim to turn ready (ready), to disappear or go
// stale (neither: claim again), or for the deadline. The subscription comes
// before the read, so an attempt that ends between the two is seen by the
// read, and one that ends after it signals the ending, with the completed
// claim when it completed.
func (e *Engine) await(ctx context.Context, k claimKey, deadline time.Time) (sandpit.Claim, bool, error) {
	poll := pollMin
	for {
		end, local := e.subscribe(k)
		c, err := e.st.GetIdempotentRequest(ctx, k.scope, k.key)
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
			return sandpit.Claim{}, false, nil
		case err != nil:
			return sandpit.Claim{}, false, err
		case c.State == "ready":
			return c, true, nil
		case !c.LockedUntil.After(e.now()):
			return sandpit.Claim{}, false, nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			return sandpit.Claim{}, false, nil
		}
		// Wake at the deadline, when the lock runs out (the attempt may have
		// stalled), or on the notification; poll only a claim this process
		// does not hold, whose end it cannot observe.
		wait := min(deadline.Sub(now), c.LockedUntil.Sub(e.now())+time.Millisecond)
		if !local {
			wait = min(wait, poll)
			poll = min(poll*2, pollMax)
		}
		var ended <-chan struct{}
		if end != nil {
			ended = end.ch
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return sandpit.Claim{}, false, ctx.Err()
		case <-ended:
			if end.claim != nil {
				t.Stop()
				return *end.claim, true, nil
			}
		case <-t.C:
		}
		t.Stop()
	}
}
