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
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// create serves POST /v2/sandboxes. The body is validated first, so a create
// that cannot succeed claims and makes nothing. Then, unless the replay
// window is zero, the create is deduplicated through the store's claim on
// (e2b.create, fingerprint): see createDeduplicated.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	w, r = api.ServerTiming(w, r)
	// The key is checked first: a malformed one makes nothing.
	key, keyed, err := api.IdempotencyKey(r, api.KeyE2B)
	if err != nil {
		fail(w, err, "")
		return
	}
	var b CreateBody
	if err := decodeCreate(r, &b); err != nil {
		fail(w, err, "")
		return
	}
	if err := b.validate(); err != nil {
		fail(w, err, "")
		return
	}
	// A template whose image is being built is not refused here: the
	// create waits for the build.
	if _, err := h.be.ResolveImage("", b.template()); err != nil && !errors.Is(err, sandpit.ErrImageBuilding) && !(errors.Is(err, sandpit.ErrUnknownTemplate) && h.ownsTemplate(r.Context(), b.template())) {
		fail(w, err, "")
		return
	}
	keyID := KeyIdentity(r.Header.Get("X-API-KEY"))
	if keyed {
		// The key names the request instead of the body; the body's
		// fingerprint is kept as the request hash, so the same key sent with
		// a different body is refused rather than replayed. A key is
		// honoured for the daemon's retention whatever the replay window.
		h.createDeduplicated(w, r, b, KeyFingerprint(keyID, key), Fingerprint(keyID, b), h.cfg.KeyRetention)
		return
	}
	if h.cfg.ReplayWindow <= 0 {
		sb, err := h.be.CreateSandbox(r.Context(), b.request(""))
		if err != nil {
			fail(w, err, "")
			return
		}
		api.WriteJSON(w, http.StatusCreated, h.created(sb))
		return
	}
	h.createDeduplicated(w, r, b, Fingerprint(keyID, b), "", h.cfg.ReplayWindow)
}

// request is the service create of a validated body.
func (b CreateBody) request(id string) service.CreateRequest {
	return service.CreateRequest{
		ID:       id,
		Template: b.template(),
		Env:      b.EnvVars,
		Labels:   b.Metadata,
		Timeout:  time.Duration(b.timeoutSeconds()) * time.Second,
		// E2B sandboxes act as "user" unless a call names another, like
		// E2B's base template; an image without that account acts as root.
		User: defaultUser,
		// E2B serves every port of a sandbox publicly unless the create
		// asks for its traffic token to be required.
		PortAccess: b.portAccess(),
		Network:    b.network(),
		OnTimeout:  b.onTimeout(),
		KeepMemory: b.keepMemory(),
		AutoResume: b.autoResume(),
		Volumes:    b.mounts(),
	}
}

func (b CreateBody) portAccess() sandpit.PortAccess {
	if b.Network != nil && b.Network.AllowPublicTraffic != nil && !*b.Network.AllowPublicTraffic {
		return sandpit.PortAccessToken
	}
	return sandpit.PortAccessPublic
}

// createDeduplicated runs the create through the service's idempotency
// engine on (e2b.create, fingerprint):
//
//   - the first request makes (or adopts) the sandbox; see runClaimed;
//   - an identical create within the replay window gets the stored response
//     verbatim, even if that sandbox has since been killed, because within
//     the window it is the same request;
//   - an identical create while the first runs waits for it (bounded by the
//     wait budget) and replays its result; if the first fails it abandons its
//     claim and the waiter claims again;
//   - an Idempotency-Key reused with a different body is refused.
func (h *Handler) createDeduplicated(w http.ResponseWriter, r *http.Request, b CreateBody, fp, reqHash string, replayTTL time.Duration) {
	req := idempotency.Request{
		Scope: identity.OwnerScope(r.Context(), Scope), Key: fp, RequestHash: reqHash,
		PendingTTL: h.cfg.PendingTTL, Wait: h.cfg.WaitBudget, ReplayTTL: replayTTL,
	}
	resp, outcome, err := h.idem.Do(r.Context(), req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		return h.runClaimed(ctx, b, a)
	})
	switch {
	case errors.Is(err, idempotency.ErrKeyMismatch):
		writeError(w, http.StatusUnprocessableEntity, "this Idempotency-Key was already used for a different create")
		return
	case errors.Is(err, idempotency.ErrKeyInFlight):
		// The SDK retries a 429 that carries an integer Retry-After, create
		// included, so a caller that ran out of patience here comes back and
		// finds the create finished.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "an identical create is still in progress; retry shortly")
		return
	case err != nil:
		if r.Context().Err() == nil {
			fail(w, err, "")
		}
		return
	}
	if outcome == idempotency.Replayed {
		if reqHash == "" {
			// No key: this create was merged with an identical one by its
			// fingerprint. Say so, since a caller who meant two sandboxes
			// gets one.
			h.log.Info("merged an identical create into an earlier one (fingerprint replay); send distinct metadata or Idempotency-Keys, or run with --e2b-replay-window 0, for separate sandboxes",
				"sandbox", resp.TargetID, "window", h.cfg.ReplayWindow.String())
		}
		h.replay(w, r, resp)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// replay answers with a completed create's stored response.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, c idempotency.Response) {
	if len(c.Body) == 0 || c.Status == 0 {
		// Every completion this facade writes stores the response; a row
		// without one was not written by it.
		sb, err := h.be.GetSandbox(r.Context(), c.TargetID)
		if err != nil {
			fail(w, err, c.TargetID)
			return
		}
		api.MarkReplayed(w)
		api.WriteJSON(w, http.StatusCreated, h.created(sb))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	api.MarkReplayed(w)
	w.WriteHeader(c.Status)
	_, _ = w.Write(c.Body)
}

// runClaimed makes the sandbox of an acquired claim. A fresh claim derives
// the id from the fingerprint and the generation; a claim taken over from a
// crashed or stalled attempt reuses the id that attempt recorded. Either way
// the id is recorded in the claim before anything is created, so an attempt
// that dies half-way is resumed on the same id, and the service's one adopt
// policy (CreateOrAdopt) decides what to do with what it left. The work runs
// detached from the client's connection, bounded by the pending TTL: a client
// that gives up does not waste a create its own retry will replay.
func (h *Handler) runClaimed(ctx context.Context, b CreateBody, a *idempotency.Attempt) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.PendingTTL)
	defer cancel()
	if !a.Resumed() {
		id, err := h.freshID(ctx, a.Key(), a.Generation)
		if err != nil {
			return idempotency.Response{}, err
		}
		if err := a.SetTarget(ctx, id); err != nil {
			return idempotency.Response{}, err
		}
	}
	sb, adopted, err := h.be.CreateOrAdopt(ctx, b.request(a.TargetID))
	if err != nil {
		return idempotency.Response{}, err
	}
	body, err := json.Marshal(h.created(sb))
	if err != nil {
		return idempotency.Response{}, err
	}
	if adopted {
		h.log.Info("adopted the sandbox of an interrupted create", "sandbox", sb.ID, "generation", a.Generation)
	}
	// Dying here leaves a finished sandbox under a pending claim, which the
	// retry must adopt.
	crashpoint.Hit(crashpoint.BeforeResponse)
	return idempotency.Response{Status: http.StatusCreated, Body: body, TargetID: sb.ID}, nil
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

// ownsTemplate reports whether ref ("name", "name:tag" or an id) names one
// of the caller's templates, which the service resolves on create (the
// daemon's own templates, which ResolveImage knows, come first).
func (h *Handler) ownsTemplate(ctx context.Context, ref string) bool {
	if h.tpl == nil {
		return false
	}
	_, err := h.tpl.Template(ctx, ref)
	return err == nil
}
