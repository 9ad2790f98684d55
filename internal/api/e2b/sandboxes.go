package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// maxListLimit is the largest page the store serves.
const maxListLimit = 1000

// listQuery is a parsed GET /v2/sandboxes query: what the store filters and
// what is filtered on the page afterwards (template and start time, which
// the store does not index; a page may then come back short, which the
// paging contract allows, and the next token stays valid).
type listQuery struct {
	opts          sandpit.ListOptions
	template      string
	startedAfter  time.Time
	wantedStates  map[string]bool
	includePaging bool
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

// parseMetadataFilter undoes the SDK's three layers of encoding: the query
// parameter itself (already decoded by url.Values), then the query string it
// holds, then each key and value, which the SDK ran through
// encodeURIComponent. The last layer is applied only where it decodes, so a
// client that encodes one layer fewer still matches literal values.
func parseMetadataFilter(raw string) (map[string]string, error) {
	out := map[string]string{}
	if raw == "" {
		return out, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, invalid("metadata filter %q is not a query string: %v", raw, err)
	}
	unescape := func(s string) string {
		if u, err := url.PathUnescape(s); err == nil {
			return u
		}
		return s
	}
	for k, vs := range pairs {
		if len(vs) != 1 {
			return nil, invalid("metadata filter names key %q %d times", k, len(vs))
		}
		out[unescape(k)] = unescape(vs[0])
	}
	return out, nil
}

func parseListQuery(q url.Values, defaultStates []string) (listQuery, error) {
	lq := listQuery{wantedStates: map[string]bool{}}
	labels, err := parseMetadataFilter(q.Get("metadata"))
	if err != nil {
		return lq, err
	}
	lq.opts.Labels = labels
	var states []string
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				states = append(states, s)
			}
		}
	}
	if len(states) == 0 {
		states = defaultStates
	}
	for _, s := range states {
		switch s {
		case stateRunning:
			lq.opts.States = append(lq.opts.States, sandpit.StateRunning)
		case statePaused:
			lq.opts.States = append(lq.opts.States, sandpit.StatePaused, sandpit.StateStopped)
		default:
			return lq, invalid("state must be %q or %q, got %q", stateRunning, statePaused, s)
		}
		lq.wantedStates[s] = true
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, invalid("limit must be between 1 and %d", maxListLimit)
		}
		lq.opts.Limit = n
	}
	lq.opts.PageToken = q.Get("nextToken")
	// E2B lists newest first unless asked otherwise.
	switch q.Get("order") {
	case "", "desc":
		lq.opts.Descending = true
	case "asc":
	default:
		return lq, invalid("order must be \"asc\" or \"desc\", got %q", q.Get("order"))
	}
	lq.template = q.Get("template")
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return lq, invalid("startedAfter must be an RFC 3339 time")
		}
		lq.startedAfter = t
	}
	return lq, nil
}

func (lq listQuery) keep(sb sandpit.Sandbox, state string) bool {
	if !lq.wantedStates[state] {
		return false
	}
	if lq.template != "" && lq.template != templateOf(sb) {
		return false
	}
	return lq.startedAfter.IsZero() || sb.CreatedAt.After(lq.startedAfter)
}

// list serves GET /v2/sandboxes: running and paused sandboxes by default,
// filtered by metadata and state, paged with limit and the X-Next-Token
// header.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query(), []string{stateRunning, statePaused})
	if err != nil {
		fail(w, err, "")
		return
	}
	page, next, err := h.be.ListSandboxes(r.Context(), lq.opts)
	if err != nil {
		fail(w, err, "")
		return
	}
	out := make([]ListedSandbox, 0, len(page))
	for _, sb := range page {
		if state, ok := e2bState(sb.State); ok && lq.keep(sb, state) {
			out = append(out, h.listed(h.withMounts(r, sb), state))
		}
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// listV1 serves the unversioned GET /sandboxes, which lists running
// sandboxes in one unpaged answer.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query(), []string{stateRunning})
	if err != nil {
		fail(w, err, "")
		return
	}
	lq.opts.Limit = maxListLimit
	out := []ListedSandbox{}
	for {
		page, next, err := h.be.ListSandboxes(r.Context(), lq.opts)
		if err != nil {
			fail(w, err, "")
			return
		}
		for _, sb := range page {
			if state, ok := e2bState(sb.State); ok && lq.keep(sb, state) {
				out = append(out, h.listed(h.withMounts(r, sb), state))
			}
		}
		if next == "" {
			break
		}
		lq.opts.PageToken = next
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// visible returns a sandbox that E2B would know: one being created or whose
// container is gone is reported as not found.
func (h *Handler) visible(r *http.Request, id string) (sandpit.Sandbox, string, error) {
	sb, err := h.be.GetSandbox(r.Context(), id)
	if err != nil {
		return sb, "", err
	}
	state, ok := e2bState(sb.State)
	if !ok {
		return sb, "", fmt.Errorf("sandbox %s is %s: %w", id, sb.State, sandpit.ErrNotFound)
	}
	return sb, state, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, state, err := h.visible(r, id)
	if err != nil {
		fail(w, err, id)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.detail(r.Context(), sb, state))
}

// kill removes the sandbox whatever its state; the SDK reads a 404 as
// "there was nothing to kill".
func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.be.DeleteSandbox(r.Context(), id); err != nil {
		fail(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is the body of POST /sandboxes/{id}/timeout and of connect.
// Connect's memory false (the SDK's onResume 'reboot') asks for a cold
// boot: a memory-paused sandbox is resumed as a filesystem pause is.
type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

func checkSeconds(name string, s int64) error {
	if s < 1 || s > maxTimeoutSeconds {
		return invalid("%s must be between 1 and %d seconds", name, maxTimeoutSeconds)
	}
	return nil
}

// setTimeout moves the end time to now + timeout, earlier or later.
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b timeoutBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, id)
		return
	}
	if b.Timeout == nil {
		fail(w, invalid("timeout is required"), id)
		return
	}
	if err := checkSeconds("timeout", *b.Timeout); err != nil {
		fail(w, err, id)
		return
	}
	if _, _, err := h.visible(r, id); err != nil {
		fail(w, err, id)
		return
	}
	if _, err := h.be.SetTimeout(r.Context(), id, time.Duration(*b.Timeout)*time.Second); err != nil {
		fail(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// updateNetwork serves sbx.updateNetwork: the body replaces the sandbox's
// whole egress policy (a field left out clears its rules, as on E2B), for
// the connections that start after the answer. The same body again
// changes nothing.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b NetworkUpdate
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, id)
		return
	}
	if _, _, err := h.visible(r, id); err != nil {
		fail(w, err, id)
		return
	}
	if _, err := h.be.UpdateNetwork(r.Context(), id, b.policy()); err != nil {
		fail(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh serves the older keep-alive call, which sets the end time to
// now + duration (default 300 s).
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b struct {
		Duration int64 `json:"duration"`
	}
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, id)
		return
	}
	if b.Duration == 0 {
		b.Duration = DefaultTimeoutSeconds
	}
	if err := checkSeconds("duration", b.Duration); err != nil {
		fail(w, err, id)
		return
	}
	if _, _, err := h.visible(r, id); err != nil {
		fail(w, err, id)
		return
	}
	if _, err := h.be.SetTimeout(r.Context(), id, time.Duration(b.Duration)*time.Second); err != nil {
		fail(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect returns a running sandbox (200), resuming a paused one first (201).
// A given timeout only ever extends a running sandbox's life, as in E2B; a
// resumed sandbox gets the timeout, or the default, from now.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	h.connectOrResume(w, r, false)
}

// resume serves the older resume call: like connect, but a sandbox that is
// already running is a conflict.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	h.connectOrResume(w, r, true)
}

func (h *Handler) connectOrResume(w http.ResponseWriter, r *http.Request, mustBePaused bool) {
	ctx := r.Context()
	id := r.PathValue("id")
	var b timeoutBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, id)
		return
	}
	if b.Timeout != nil {
		if err := checkSeconds("timeout", *b.Timeout); err != nil {
			fail(w, err, id)
			return
		}
	}
	sb, state, err := h.visible(r, id)
	if err != nil {
		fail(w, err, id)
		return
	}
	status := http.StatusOK
	switch {
	case state == statePaused:
		status = http.StatusCreated
		if b.Memory != nil && !*b.Memory && sb.State == sandpit.StatePaused && sb.PauseMode == sandpit.PauseMemory {
			// A reboot of a frozen sandbox: it is stopped and booted
			// again, the same cold start a filesystem pause resumes with.
			if _, err := h.be.StopSandbox(ctx, id); err != nil && !errors.Is(err, service.ErrDeletedOnStop) {
				fail(w, err, id)
				return
			}
		}
		if sb, err = h.be.StartSandbox(ctx, id); err != nil {
			// A concurrent connect may have resumed it first; that is
			// success for this one too.
			again, gerr := h.be.GetSandbox(ctx, id)
			if gerr != nil || again.State != sandpit.StateRunning {
				fail(w, err, id)
				return
			}
			sb = again
		}
		secs := int64(DefaultTimeoutSeconds)
		if b.Timeout != nil {
			secs = *b.Timeout
		}
		if sb, err = h.be.SetTimeout(ctx, id, time.Duration(secs)*time.Second); err != nil {
			fail(w, err, id)
			return
		}
	case mustBePaused:
		writeError(w, http.StatusConflict, "sandbox "+id+" is already running")
		return
	case b.Timeout != nil && !sb.EndAt.IsZero():
		want := time.Duration(*b.Timeout) * time.Second
		if h.now().Add(want).After(sb.EndAt) {
			if sb, err = h.be.SetTimeout(ctx, id, want); err != nil {
				fail(w, err, id)
				return
			}
		}
	}
	api.WriteJSON(w, status, h.created(sb))
}

// pauseBody is the body of POST /sandboxes/{id}/pause: memory false (the
// SDK's pause({ keepMemory: false })) is a filesystem pause; absent or true
// keeps the memory.
type pauseBody struct {
	Memory *bool `json:"memory"`
}

// pause pauses a running sandbox; a sandbox that is not running answers 409,
// which the SDK reports as "already paused". A paused sandbox is kept until
// it is resumed or killed, up to the longest lifetime the service allows.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	var b pauseBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, id)
		return
	}
	mode := sandpit.PauseMemory
	if b.Memory != nil && !*b.Memory {
		mode = sandpit.PauseFilesystem
	}
	if _, _, err := h.visible(r, id); err != nil {
		fail(w, err, id)
		return
	}
	if _, err := h.be.PauseSandbox(ctx, id, mode); err != nil {
		if errors.Is(err, service.ErrNotRunning) {
			writeError(w, http.StatusConflict, "sandbox "+id+" is already paused")
			return
		}
		fail(w, err, id)
		return
	}
	if _, err := h.be.SetTimeout(ctx, id, pausedRetention); err != nil {
		fail(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// metrics answers the samples taken within [start, end] (Unix seconds,
// either optional), oldest first, from the daemon's metrics history. A
// request without a window whose sandbox has no sample yet gets one taken
// now, so that a call right after create is not empty; a window in the past
// with nothing in it is an empty list, as in E2B.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	var bounds [2]time.Time
	for i, name := range []string{"start", "end"} {
		if v := q.Get(name); v != "" {
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil || secs < 0 {
				fail(w, invalid("%s must be a Unix time in seconds", name), id)
				return
			}
			bounds[i] = time.Unix(secs, 0)
		}
	}
	start, end := bounds[0], bounds[1]
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		fail(w, invalid("end is before start"), id)
		return
	}
	if _, _, err := h.visible(r, id); err != nil {
		fail(w, err, id)
		return
	}
	var samples []sandpit.Stats
	if hist := h.cfg.Metrics; hist != nil {
		var err error
		if samples, err = hist.Window(r.Context(), id, start, end); err != nil {
			fail(w, err, id)
			return
		}
		if len(samples) == 0 && start.IsZero() && end.IsZero() {
			st, err := hist.Sample(r.Context(), id)
			if err != nil {
				fail(w, err, id)
				return
			}
			samples = append(samples, st)
		}
	} else {
		// No history (tests of the facade alone): the current sample.
		st, err := h.be.Stats(r.Context(), id)
		if err != nil {
			fail(w, err, id)
			return
		}
		samples = append(samples, st)
	}
	out := make([]SandboxMetric, 0, len(samples))
	for _, st := range samples {
		ts := st.Timestamp
		if ts.IsZero() {
			ts = h.now()
		}
		out = append(out, SandboxMetric{
			Timestamp: ts.UTC(), TimestampUnix: ts.Unix(), CPUCount: st.CPUCount, CPUUsedPct: st.CPUUsedPct,
			MemUsed: st.MemUsed, MemTotal: st.MemTotal, DiskUsed: st.DiskUsed, DiskTotal: st.DiskTotal,
		})
	}
	api.WriteJSON(w, http.StatusOK, out)
}
