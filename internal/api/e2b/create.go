package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// errCreateInProgress is returned when a claim taken over from a stalled
// attempt finds that attempt's sandbox still being created in this process.
var errCreateInProgress = errors.New("an earlier attempt at this create is still running")

// create serves POST /v2/sandboxes. The body is validated first, so a create
// that cannot succeed claims and makes nothing. Then, unless the replay
// window is zero, the create is deduplicated through the store's claim on
// (e2b.create, fingerprint): see createDeduplicated.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var b CreateBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	if err := b.validate(); err != nil {
		fail(w, err, "")
		return
	}
	if _, err := h.be.ResolveImage("", b.template()); err != nil {
		fail(w, err, "")
		return
	}
	keyID := KeyIdentity(r.Header.Get("X-API-KEY"))
	if h.cfg.ReplayWindow <= 0 {
		sb, err := h.be.CreateSandbox(r.Context(), b.request(""))
		if err != nil {
			fail(w, err, "")
			return
		}
		api.WriteJSON(w, http.StatusCreated, h.created(sb))
		return
	}
	fp, reqHash := Fingerprint(keyID, b), ""
	if keys, ok := r.Header["Idempotency-Key"]; ok {
		if len(keys) != 1 || !validKey(keys[0]) {
			writeError(w, http.StatusBadRequest, "Idempotency-Key must be one header of 1-255 printable ASCII characters")
			return
		}
		// The key names the request instead of the body; the body's
		// fingerprint is kept as the request hash, so the same key sent with
		// a different body is refused rather than replayed.
		fp, reqHash = KeyFingerprint(keyID, keys[0]), fp
	}
	h.createDeduplicated(w, r, b, fp, reqHash)
}

func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// request is the service create of a validated body.
func (b CreateBody) request(id string) service.CreateRequest {
	return service.CreateRequest{
		ID:       id,
		Template: b.template(),
		Env:      b.EnvVars,
		Labels:   b.Metadata,
		Timeout:  time.Duration(b.timeoutSeconds()) * time.Second,
		Network:  b.network(),
	}
}

// createDeduplicated runs the claim loop of a create:
//
//   - Acquired: this request makes (or adopts) the sandbox; see runClaimed.
//   - Replay: an identical create completed within the replay window; its
//     stored response is returned verbatim, even if that sandbox has since
//     been killed, because within the window it is the same request.
//   - InFlight: an identical create is running; wait for it (bounded by the
//     wait budget) and replay its result. If it fails it deletes its claim,
//     and this request claims again; if its lock runs out, the claim is
//     stale and this request takes it over.
//   - Mismatch: an Idempotency-Key reused with a different body.
func (h *Handler) createDeduplicated(w http.ResponseWriter, r *http.Request, b CreateBody, fp, reqHash string) {
	ctx := r.Context()
	deadline := time.Now().Add(h.cfg.WaitBudget)
	for {
		claim, err := h.claim(ctx, fp, reqHash)
		if err != nil {
			fail(w, err, "")
			return
		}
		switch claim.Outcome {
		case sandpit.Acquired:
			h.runClaimed(w, r, b, claim)
			return
		case sandpit.Replay:
			h.replay(w, r, claim)
			return
		case sandpit.Mismatch:
			writeError(w, http.StatusUnprocessableEntity, "this Idempotency-Key was already used for a different create")
			return
		case sandpit.InFlight:
			done, ready, err := h.await(ctx, fp, deadline)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					fail(w, err, "")
				}
				return
			case ready:
				h.replay(w, r, done)
				return
			case time.Now().After(deadline):
				// The SDK retries a 429 that carries an integer Retry-After,
				// create included, so a caller that ran out of patience here
				// comes back and finds the create finished.
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusTooManyRequests, "an identical create is still in progress; retry shortly")
				return
			}
			// The claim vanished (the first attempt failed) or went stale:
			// claim again.
		default:
			fail(w, fmt.Errorf("unexpected claim outcome %v", claim.Outcome), "")
			return
		}
	}
}

// claim claims the create. A pending claim left by a daemon that died is
// freed at daemon start (store.ExpirePendingClaims), so its retry acquires it
// at once, with the dead attempt's generation and recorded target.
func (h *Handler) claim(ctx context.Context, fp, reqHash string) (sandpit.Claim, error) {
	return h.st.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{
		Scope: Scope, Fingerprint: fp, RequestHash: reqHash, PendingTTL: h.cfg.PendingTTL,
	}, h.now())
}

// await polls an in-flight claim until it turns ready (ready), disappears or
// goes stale (neither: claim again), or the deadline passes.
func (h *Handler) await(ctx context.Context, fp string, deadline time.Time) (sandpit.Claim, bool, error) {
	delay := 20 * time.Millisecond
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return sandpit.Claim{}, false, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
		c, err := h.st.GetIdempotentRequest(ctx, Scope, fp)
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
			return sandpit.Claim{}, false, nil
		case err != nil:
			return sandpit.Claim{}, false, err
		case c.State == "ready":
			return c, true, nil
		case !c.LockedUntil.After(h.now()):
			return sandpit.Claim{}, false, nil
		}
	}
	return sandpit.Claim{}, false, nil
}

// replay answers with a completed create's stored response.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, c sandpit.Claim) {
	if len(c.ResponseBody) == 0 || c.ResponseStatus == 0 {
		// Every completion this facade writes stores the response; a row
		// without one was not written by it.
		sb, err := h.be.GetSandbox(r.Context(), c.TargetID)
		if err != nil {
			fail(w, err, c.TargetID)
			return
		}
		api.WriteJSON(w, http.StatusCreated, h.created(sb))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(c.ResponseStatus)
	_, _ = w.Write(c.ResponseBody)
}

// runClaimed makes the sandbox of an acquired claim. A fresh claim derives
// the id from the fingerprint and the generation; a claim taken over from a
// crashed or stalled attempt reuses the id that attempt recorded. Either way
// the id is recorded in the claim before anything is created, so an attempt
// that dies half-way is resumed on the same id: a running sandbox under it is
// adopted, a broken one is removed and made again. The work runs detached
// from the client's connection, bounded by the pending TTL: a client that
// gives up does not waste a create its own retry will replay. Every failure
// deletes the claim, so the next attempt starts afresh instead of waiting out
// the lock.
func (h *Handler) runClaimed(w http.ResponseWriter, r *http.Request, b CreateBody, c sandpit.Claim) {
	fp := c.Fingerprint
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.PendingTTL)
	defer cancel()
	rollback := func(cause error) {
		if err := h.st.DeleteIdempotentRequest(ctx, Scope, fp); err != nil {
			h.log.Error("release create claim", "fingerprint", fp, "err", err)
		}
		fail(w, cause, "")
	}

	id, resumed := c.TargetID, c.TargetID != ""
	if !resumed {
		var err error
		if id, err = h.freshID(ctx, fp, c.Generation); err != nil {
			rollback(err)
			return
		}
	}
	if err := h.st.SetIdempotentTarget(ctx, Scope, fp, c.Generation, id, h.now()); err != nil {
		rollback(err)
		return
	}
	var (
		sb      sandpit.Sandbox
		adopted bool
		err     error
	)
	if resumed {
		sb, adopted, err = h.adoptOrCreate(ctx, id, b)
	} else {
		sb, err = h.be.CreateSandbox(ctx, b.request(id))
	}
	if err != nil {
		rollback(err)
		return
	}
	body, err := json.Marshal(h.created(sb))
	if err != nil {
		rollback(err)
		return
	}
	if adopted {
		h.log.Info("adopted the sandbox of an interrupted create", "sandbox", id, "generation", c.Generation)
	}
	// A test crash point: dying here leaves a finished sandbox under a
	// pending claim, which the retry must adopt.
	h.be.Crash(service.CrashBeforeResponse)
	err = h.st.CompleteIdempotentRequest(ctx, sandpit.Completion{
		Scope: Scope, Fingerprint: fp, Generation: c.Generation, TargetID: id,
		ResponseStatus: http.StatusCreated, ResponseBody: body, ReplayTTL: h.cfg.ReplayWindow,
	}, h.now())
	if err != nil {
		// The sandbox exists and is this request's answer. A duplicate that
		// later finds the claim stale takes it over on the same id and
		// adopts this sandbox, so nothing is duplicated.
		h.log.Error("complete create claim", "sandbox", id, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// maxIDProbes bounds freshID's search; each probe is one indexed lookup.
const maxIDProbes = 16

// freshID returns the derived id of a fresh claim. A sandbox already under
// that id cannot be this claim's: it belongs to an earlier claim row of the
// same fingerprint, completed and then reaped, whose generation numbering
// this row restarted. Adopting it would answer a genuinely new create with an
// old sandbox, so the next id of the probe sequence is taken instead. The
// claim is held exclusively, so no other create races for these ids.
func (h *Handler) freshID(ctx context.Context, fp string, generation int64) (string, error) {
	for probe := range maxIDProbes {
		id := sandboxIDFor(fp, generation, probe)
		_, err := h.be.GetSandbox(ctx, id)
		if errors.Is(err, sandpit.ErrNotFound) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free sandbox id for fingerprint %s after %d probes", fp, maxIDProbes)
}

func (h *Handler) adoptOrCreate(ctx context.Context, id string, b CreateBody) (sandpit.Sandbox, bool, error) {
	sb, err := h.be.GetSandbox(ctx, id)
	switch {
	case err == nil && sb.State == sandpit.StateRunning:
		return sb, true, nil
	case err == nil && sb.State == sandpit.StateCreating:
		// Only a create of this very process can be creating it: one that
		// stalled past the pending TTL and lost its claim to this request.
		return sb, false, fmt.Errorf("sandbox %s: %w", id, errCreateInProgress)
	case err == nil:
		h.log.Warn("removing the leftover of an interrupted create", "sandbox", id, "state", sb.State)
		if err := h.be.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			return sb, false, err
		}
	case !errors.Is(err, sandpit.ErrNotFound):
		return sb, false, err
	}
	sb, err = h.be.CreateSandbox(ctx, b.request(id))
	return sb, false, err
}
