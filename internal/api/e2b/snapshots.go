package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// SnapshotBackend is what the snapshot and fork routes need of the service.
type SnapshotBackend interface {
	CreateSnapshot(ctx context.Context, sandboxID string, req service.SnapshotRequest) (sandpit.Template, error)
	Fork(ctx context.Context, parentID string, req service.ForkRequest) ([]service.ForkResult, error)
}

// defaultForkTimeout is a fork's time to live when the request names none,
// as E2B's API documents it.
const defaultForkTimeout = 15 * time.Second

// snapshotRoutes are E2B's snapshots and forks. A snapshot is a template, as
// on E2B: Sandbox.create takes its id, Sandbox.deleteSnapshot deletes it
// through DELETE /templates/{id}, which refuses while a sandbox runs from it.
func (h *Handler) snapshotRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /sandboxes/{id}/snapshots", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate, Prefix: templates.IDPrefix}, h.createSnapshot)
	keyed("POST /sandboxes/{id}/fork", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate}, h.fork)
	route("GET /snapshots", sandpit.ActionRead, h.listSnapshots)
}

func (h *Handler) snapshots(w http.ResponseWriter) (SnapshotBackend, bool) {
	sb, ok := h.be.(SnapshotBackend)
	if !ok || h.tpl == nil {
		writeError(w, http.StatusNotImplemented, "snapshots are not available on this daemon")
		return nil, false
	}
	return sb, true
}

// SnapshotBody is POST /sandboxes/{id}/snapshots.
type SnapshotBody struct {
	Name string `json:"name,omitempty"`
}

// SnapshotInfo is E2B's SnapshotInfo. The id carries the tag a create
// resolves (the snapshot's newest build), and names list it by name.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotInfo(t sandpit.Template) SnapshotInfo {
	info := SnapshotInfo{SnapshotID: t.ID + ":default", Names: []string{}}
	if t.Name != "" {
		info.SnapshotID = t.Name + ":default"
		info.Names = append(info.Names, t.Name+":default")
	}
	return info
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	be, ok := h.snapshots(w)
	if !ok {
		return
	}
	var b SnapshotBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	id := r.PathValue("id")
	t, err := be.CreateSnapshot(r.Context(), id, service.SnapshotRequest{ID: api.TargetID(r.Context()), Name: b.Name})
	if err != nil {
		fail(w, err, id)
		return
	}
	api.WriteJSON(w, http.StatusCreated, snapshotInfo(t))
}

// listSnapshots serves GET /snapshots, filtered by sandboxID and name and
// paged with limit and the X-Next-Token header (the token is the offset).
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.snapshots(w); !ok {
		return
	}
	q := r.URL.Query()
	limit, offset := 100, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "limit must be between 1 and 1000")
			return
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "invalid nextToken")
			return
		}
		offset = n
	}
	ts, err := h.tpl.Snapshots(r.Context(), q.Get("sandboxID"), q.Get("name"))
	if err != nil {
		fail(w, err, "")
		return
	}
	out := []SnapshotInfo{}
	for i := offset; i < len(ts) && len(out) < limit; i++ {
		out = append(out, snapshotInfo(ts[i]))
	}
	if next := offset + len(out); next < len(ts) {
		w.Header().Set("X-Next-Token", strconv.Itoa(next))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// ForkBody is SandboxForkRequest.
type ForkBody struct {
	Count   *int `json:"count,omitempty"`
	Timeout *int `json:"timeout,omitempty"` // seconds
}

// ForkResult is SandboxForkResult: exactly one of Sandbox and Error.
type ForkResult struct {
	Sandbox *CreatedSandbox `json:"sandbox,omitempty"`
	Error   *ErrorBody      `json:"error,omitempty"`
}

// fork serves POST /sandboxes/{id}/fork. Without an Idempotency-Key a fork
// is not deduplicated: two fork calls make two sets of copies, as on E2B.
// With one, its copies' ids derive from the id its claim recorded, so the
// retry of a crashed fork makes the same copies, not a second set.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	be, ok := h.snapshots(w)
	if !ok {
		return
	}
	var b ForkBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	count, timeout := 1, defaultForkTimeout
	if b.Count != nil {
		count = *b.Count
	}
	if b.Timeout != nil {
		if *b.Timeout <= 0 {
			writeError(w, http.StatusBadRequest, "timeout must be a positive number of seconds")
			return
		}
		timeout = time.Duration(*b.Timeout) * time.Second
	}
	id := r.PathValue("id")
	results, err := be.Fork(r.Context(), id, service.ForkRequest{Count: count, Timeout: timeout, Seed: api.TargetID(r.Context())})
	if err != nil {
		fail(w, err, id)
		return
	}
	out := make([]ForkResult, 0, len(results))
	for _, res := range results {
		if res.Err != nil {
			p := api.Classify(res.Err)
			if errors.Is(res.Err, sandpit.ErrNotFound) {
				p.Status = http.StatusNotFound
			}
			out = append(out, ForkResult{Error: &ErrorBody{Code: p.Status, Message: p.Message}})
			continue
		}
		c := h.created(res.Sandbox)
		out = append(out, ForkResult{Sandbox: &c})
	}
	api.WriteJSON(w, http.StatusCreated, out)
}
