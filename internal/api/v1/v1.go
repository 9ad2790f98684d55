// Package v1 is Sandpit's native REST API under /v1.
package v1

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/agentrelay"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// Handler serves /v1.
type Handler struct {
	svc  Backend
	ids  *identity.Service
	vols *volumes.Service
	tpl  TemplateBackend
	// secrets is the secrets aggregate, once ServeSecrets mounted it.
	secrets *secrets.Service
	auth    *api.Auth
	mux     *http.ServeMux
	// routes declares what every route does; the scope check happens when a
	// route is matched.
	routes *api.Routes
	// surfaces are the facades' route lists, for GET /v1/scopes.
	surfaces []Surface
	// relay carries the agent routes' requests to the agents.
	relay *agentrelay.Relay
}

// Routes lists the native API's routes and their actions.
func (h *Handler) Routes() []api.Route { return h.routes.List() }

// Forwarded is every route as a cluster's gateway reads it (see
// api.Forwarding).
func (h *Handler) Forwarded() []api.Route { return h.routes.Forwarded() }

// forwarding declares how a cluster forwards what is not about one sandbox
// named in the path: creates are placed (a retry meets its first attempt by
// its Idempotency-Key), the listing and the event stream cover every node,
// and every other path under a sandbox goes to its owner too, so that a
// sandbox lost with its node answers as lost whatever is asked of it.
func (h *Handler) forwarding() {
	h.routes.Forward("POST /v1/sandboxes", api.Forwarding{Locate: api.LocateCreate, Template: api.TemplateField("template"), Volumes: api.VolumeRefs("volumes", "volume")})
	h.routes.Forward("GET /v1/sandboxes", api.Forwarding{Locate: api.LocateList})
	h.routes.Forward("GET /v1/events", api.Forwarding{Locate: api.LocateEvents})
	h.routes.Declare("/v1/sandboxes/{id}", api.Forwarding{Locate: api.LocateSandbox})
	h.routes.Declare("/v1/sandboxes/{id}/", api.Forwarding{Locate: api.LocateSandbox})
}

// New builds the /v1 handler; tpl serves its templates, snapshots and builds. Every route needs "Authorization: Bearer
// <token>": the daemon's admin token or a personal access token, whose owner
// scopes everything the request sees and makes. The keyed routes run through
// idem (nil: Idempotency-Key is ignored).
func New(svc Backend, tpl TemplateBackend, auth *api.Auth, wrap func(pattern string, h http.HandlerFunc) http.Handler, idem *api.Idempotency) *Handler {
	h := &Handler{svc: svc, ids: svc.Identity(), vols: svc.Volumes(), tpl: tpl, auth: auth, mux: http.NewServeMux(), relay: agentrelay.New(svc.AgentHTTP().Transport())}
	// Where a sandbox's id goes, its name does too.
	h.routes = api.NewRoutes(h.mux, func(w http.ResponseWriter, _ *http.Request, err error) { fail(w, err) }, wrap).NamesToo().Keyed(keys(idem))
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v1/sandboxes", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate}, h.create)
	route("GET /v1/sandboxes", sandpit.ActionRead, h.list)
	route("GET /v1/sandboxes/{id}", sandpit.ActionRead, h.get)
	keyed("DELETE /v1/sandboxes/{id}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.delete)
	keyed("POST /v1/sandboxes/{id}/start", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.start)
	keyed("POST /v1/sandboxes/{id}/stop", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.stop)
	keyed("POST /v1/sandboxes/{id}/pause", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.pause)
	keyed("POST /v1/sandboxes/{id}/resume", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.resume)
	route("POST /v1/sandboxes/{id}/exec", sandpit.ActionExecute, h.exec)
	route("GET /v1/sandboxes/{id}/pty", sandpit.ActionExecute, h.pty)
	route("GET /v1/sandboxes/{id}/files", sandpit.ActionReadFiles, h.files)
	route("PUT /v1/sandboxes/{id}/files", sandpit.ActionWriteFiles, h.files)
	h.routes.HandleResolved("/v1/sandboxes/{id}/agent/{rest...}", sandpit.ActionExecute,
		"by agent path: file reads, `Stat`, `ListDir`, watchers and `process.Process/List` read-files; file writes, `MakeDir`, `Move`, `Remove` write-files; `GET health` read; the rest execute",
		agentAction, h.agent)
	keyed("POST /v1/sandboxes/{id}/ports", sandpit.ActionExpose, api.Keying{Mode: api.Keyed}, h.expose)
	route("GET /v1/sandboxes/{id}/ports", sandpit.ActionRead, h.listPorts)
	route("GET /v1/sandboxes/{id}/stats", sandpit.ActionRead, h.stats)
	keyed("PUT /v1/sandboxes/{id}/network", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.updateNetwork)
	keyed("PUT /v1/sandboxes/{id}/resources", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.resize)
	route("GET /v1/sandboxes/{id}/network/denied", sandpit.ActionRead, h.networkDenied)
	keyed("DELETE /v1/sandboxes/{id}/ports/{port}", sandpit.ActionExpose, api.Keying{Mode: api.Keyed}, h.unexpose)
	keyed("POST /v1/sandboxes/{id}/custom-domains", sandpit.ActionExpose, api.Keying{Mode: api.Keyed}, h.addDomain)
	route("GET /v1/sandboxes/{id}/custom-domains", sandpit.ActionRead, h.listDomains)
	keyed("DELETE /v1/sandboxes/{id}/custom-domains/{hostname}", sandpit.ActionExpose, api.Keying{Mode: api.Keyed}, h.removeDomain)
	route("GET /v1/events", sandpit.ActionRead, h.events)
	h.templateRoutes()
	h.snapshotRoutes()
	h.volumeRoutes()
	h.sshKeyRoutes()
	h.codeRoutes()
	h.forwarding()
	route("GET /v1/debug/state", sandpit.ActionAdmin, h.debugState)
	h.adminRoutes()
	route("GET /v1/pool", sandpit.ActionAdmin, h.poolStatus)
	route("GET /v1/scopes", sandpit.ActionRead, h.scopes)
	h.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, api.Problem{Status: http.StatusNotFound, Code: apitypes.CodeNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	presented := api.BearerToken(r)
	if presented == "" {
		// A browser's WebSocket (the PTY) carries its token as a
		// subprotocol.
		presented = api.WebSocketBearer(r)
	}
	r, err := h.auth.Authorize(r, presented)
	if err != nil {
		fail(w, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// fail renders err with the native API's one renderer.
func fail(w http.ResponseWriter, err error) { api.WriteError(w, nil, err) }

// networkPolicy converts a wire egress policy to the domain's.
func networkPolicy(n *apitypes.Network) sandpit.NetworkPolicy {
	if n == nil {
		return sandpit.NetworkPolicy{}
	}
	p := sandpit.NetworkPolicy{Egress: n.Egress, Allow: n.Allow, Deny: n.Deny, AllowDomains: n.AllowDomains, DenyDomains: n.DenyDomains,
		Mode: n.Mode, Profiles: n.Profiles}
	for host, list := range n.Rules {
		if p.Rules == nil {
			p.Rules = map[string][]sandpit.NetworkRule{}
		}
		rules := make([]sandpit.NetworkRule, 0, len(list))
		for _, r := range list {
			var nr sandpit.NetworkRule
			if r.Transform != nil {
				nr.Transform = &sandpit.NetworkTransform{Headers: r.Transform.Headers}
			}
			rules = append(rules, nr)
		}
		p.Rules[host] = rules
	}
	return p
}

// wireRules renders a policy's rules: as given, placeholders and all.
func wireRules(in map[string][]sandpit.NetworkRule) map[string][]apitypes.NetworkRule {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string][]apitypes.NetworkRule, len(in))
	for host, list := range in {
		rules := make([]apitypes.NetworkRule, 0, len(list))
		for _, r := range list {
			var wr apitypes.NetworkRule
			if r.Transform != nil {
				wr.Transform = &apitypes.NetworkTransform{Headers: r.Transform.Headers}
			}
			rules = append(rules, wr)
		}
		out[host] = rules
	}
	return out
}

// toSandbox renders a sandbox of this node; in a cluster it names the node,
// so that a user of any node sees where each sandbox lives.
func (h *Handler) toSandbox(ctx context.Context, sb sandpit.Sandbox) apitypes.Sandbox {
	out := apitypes.Sandbox{ID: sb.ID, Name: sb.Name, Image: sb.Image, Template: sb.Template, State: string(sb.State), StateReason: sb.StateReason, Labels: sb.Labels, Env: sandpit.RedactEnv(ctx, sb.Env),
		CPU: sb.CPU, MemoryMB: sb.MemoryMB, DiskMB: h.svc.Config().DiskLimitMB(sb.DiskMB), CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, Node: h.svc.Config().NodeName}
	if !sb.EndAt.IsZero() {
		t := sb.EndAt
		out.EndAt = &t
	}
	if !sb.Network.IsZero() {
		out.Network = &apitypes.Network{Egress: sb.Network.Egress, Allow: sb.Network.Allow, Deny: sb.Network.Deny,
			AllowDomains: sb.Network.AllowDomains, DenyDomains: sb.Network.DenyDomains, Mode: sb.Network.Mode, Rules: wireRules(sb.Network.Rules)}
	}
	out.PauseMode = string(sb.PauseMode)
	if sb.TimeoutAction() != sandpit.OnTimeoutKill || sb.AutoResume {
		out.Lifecycle = &apitypes.Lifecycle{OnTimeout: string(sb.TimeoutAction()), KeepMemory: sb.KeepMemory, AutoResume: sb.AutoResume}
	}
	out.Volumes = toMounts(sb.Volumes)
	return out
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	w, r = api.ServerTiming(w, r)
	var req apitypes.CreateRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	if req.TimeoutS < 0 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("timeout_s must not be negative")))
		return
	}
	creq := service.CreateRequest{
		ID: IDFromContext(r.Context()), Name: req.Name, Image: req.Image, Template: req.Template, Env: req.Env, Labels: req.Labels,
		CPU: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Timeout: time.Duration(req.TimeoutS) * time.Second,
		Network: networkPolicy(req.Network),
	}
	if l := req.Lifecycle; l != nil {
		creq.OnTimeout, creq.KeepMemory, creq.AutoResume = sandpit.OnTimeout(l.OnTimeout), l.KeepMemory, l.AutoResume
	}
	for _, m := range req.Volumes {
		creq.Volumes = append(creq.Volumes, service.MountRequest{Volume: m.Volume, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	var (
		sb  sandpit.Sandbox
		err error
	)
	if creq.ID != "" {
		// A keyed create: the id is recorded in the claim, and an earlier
		// attempt of the same request may already have made the sandbox.
		sb, _, err = h.svc.CreateOrAdopt(r.Context(), creq)
	} else {
		sb, err = h.svc.CreateSandbox(r.Context(), creq)
	}
	if err != nil {
		fail(w, err)
		return
	}
	if len(sb.Volumes) == 0 && len(creq.Volumes) > 0 {
		// An adopted sandbox is read back from its row, which does not
		// carry its mounts.
		if ms, err := h.vols.SandboxMounts(r.Context(), sb.ID); err == nil {
			sb.Volumes = ms
		}
	}
	crashpoint.Hit(crashpoint.BeforeResponse)
	api.WriteJSON(w, http.StatusCreated, h.toSandbox(r.Context(), sb))
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := sandpit.ListOptions{PageToken: q.Get("page_token"), Labels: map[string]string{}}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			fail(w, errors.Join(sandpit.ErrInvalid, errors.New("limit must be 1-1000")))
			return
		}
		opts.Limit = n
	}
	for _, kv := range q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fail(w, errors.Join(sandpit.ErrInvalid, errors.New("label filter must be key=value")))
			return
		}
		opts.Labels[k] = v
	}
	if st := q.Get("state"); st != "" {
		for _, one := range strings.Split(st, ",") {
			opts.States = append(opts.States, sandpit.State(one))
		}
	}
	page, next, err := h.svc.ListSandboxes(r.Context(), opts)
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListResponse{Sandboxes: make([]apitypes.Sandbox, 0, len(page)), NextPageToken: next}
	for _, sb := range page {
		out.Sandboxes = append(out.Sandboxes, h.toSandbox(r.Context(), sb))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	sb, err := h.svc.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.DeleteSandbox(r.Context(), r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request) {
	sb, err := h.svc.StartSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

func (h *Handler) stop(w http.ResponseWriter, r *http.Request) {
	sb, err := h.svc.StopSandbox(r.Context(), r.PathValue("id"))
	if errors.Is(err, service.ErrDeletedOnStop) {
		// A Daytona sandbox with auto-delete 0 went with its stop: the
		// stop itself succeeded.
		err = nil
	}
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

// pause pauses a running sandbox in the body's mode (memory by default); a
// sandbox already paused in that mode answers as it is, so a retry without
// a key succeeds too.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	var req apitypes.PauseRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	mode := sandpit.PauseMode(req.Mode)
	switch mode {
	case sandpit.PauseNone:
		mode = sandpit.PauseMemory
	case sandpit.PauseMemory, sandpit.PauseFilesystem:
	default:
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New(`mode must be "memory" or "filesystem"`)))
		return
	}
	id := r.PathValue("id")
	sb, err := h.svc.PauseSandbox(r.Context(), id, mode)
	if errors.Is(err, service.ErrNotRunning) {
		if cur, gerr := h.svc.GetSandbox(r.Context(), id); gerr == nil && cur.State == sandpit.StatePaused && cur.PauseMode == mode {
			sb, err = cur, nil
		}
	}
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

// resume resumes a paused sandbox; one that is not paused is answered as it
// is.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	sb, err := h.svc.ResumeSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

func (h *Handler) exec(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ExecRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	res, err := h.svc.Exec(r.Context(), r.PathValue("id"), service.ExecRequest{
		Cmd: req.Cmd, Args: req.Args, Env: req.Env, Cwd: req.Cwd, Timeout: time.Duration(req.TimeoutS) * time.Second,
	})
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, apitypes.ExecResult{ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr), Truncated: res.Truncated})
}

// files proxies GET (read) and PUT (write, raw body) of one file to the
// agent's /files endpoint.
func (h *Handler) files(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("path") == "" {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("query parameter path is required")))
		return
	}
	addr, token, err := h.svc.AgentTarget(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	if r.Method == http.MethodPut {
		r.Method = http.MethodPost
		if r.Header.Get("Content-Type") == "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
			r.Header.Set("Content-Type", "application/octet-stream")
		}
	}
	h.relay.ToAgent(w, r, addr, "/files", token, agentUnreachable)
}

// agent proxies the whole agent protocol (Connect RPC and /files) so native
// clients can stream.
func (h *Handler) agent(w http.ResponseWriter, r *http.Request) {
	addr, token, err := h.svc.AgentTarget(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	h.relay.ToAgent(w, r, addr, "/"+r.PathValue("rest"), token, agentUnreachable)
}

// agentAction is what a request through the agent passthrough does, by the
// agent path it names: reading files or listings is a file read, changing
// them a file write, and anything else (starting or signalling processes,
// unknown paths) counts as running code.
func agentAction(r *http.Request) sandpit.Action {
	rest := r.PathValue("rest")
	switch rest {
	case "health":
		return sandpit.ActionRead
	case "files":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return sandpit.ActionReadFiles
		}
		return sandpit.ActionWriteFiles
	case "filesystem.Filesystem/Stat", "filesystem.Filesystem/ListDir", "filesystem.Filesystem/WatchDir",
		"filesystem.Filesystem/CreateWatcher", "filesystem.Filesystem/GetWatcherEvents", "filesystem.Filesystem/RemoveWatcher",
		"process.Process/List":
		return sandpit.ActionReadFiles
	case "filesystem.Filesystem/MakeDir", "filesystem.Filesystem/Move", "filesystem.Filesystem/Remove":
		return sandpit.ActionWriteFiles
	}
	return sandpit.ActionExecute
}

func agentUnreachable(w http.ResponseWriter, err error) {
	fail(w, api.Problem{Status: http.StatusBadGateway, Code: apitypes.CodeUpstream, Message: "sandbox agent unreachable: " + err.Error()})
}

func toPort(p sandpit.ExposedPort, reused bool) apitypes.Port {
	return apitypes.Port{Port: p.Port, Protocol: p.Protocol, HostPort: p.HostPort, PublicURL: p.PublicURL, Reused: reused, CreatedAt: p.CreatedAt}
}

func (h *Handler) expose(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ExposeRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	res, err := h.svc.ExposePort(r.Context(), r.PathValue("id"), req.Port, req.Protocol)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusCreated
	if res.Reuse {
		status = http.StatusOK
	}
	api.WriteJSON(w, status, toPort(res.Port, res.Reuse))
}

func (h *Handler) listPorts(w http.ResponseWriter, r *http.Request) {
	ports, err := h.svc.ListPorts(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.PortList{Ports: make([]apitypes.Port, 0, len(ports))}
	for _, p := range ports {
		out.Ports = append(out.Ports, toPort(p, false))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := h.svc.GetSandbox(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	if sb.State != sandpit.StateRunning {
		// The engine answers zeros for a container that is not running:
		// that would read as an idle sandbox.
		fail(w, fmt.Errorf("%w: sandbox %s is %s", service.ErrNotRunning, id, sb.State))
		return
	}
	st, err := h.svc.Stats(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, apitypes.Stats{
		CPUCount: st.CPUCount, CPUUsedPercent: st.CPUUsedPct,
		MemoryUsedBytes: st.MemUsed, MemoryLimitBytes: st.MemTotal,
		DiskUsedBytes: st.DiskUsed, DiskLimitBytes: st.DiskTotal, Time: st.Timestamp,
	})
}

func (h *Handler) unexpose(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("port must be between 1 and 65535")))
		return
	}
	if err := h.svc.UnexposePort(r.Context(), r.PathValue("id"), port); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) toDomain(d sandpit.CustomDomain) apitypes.Domain {
	return apitypes.Domain{Hostname: d.Hostname, SandboxID: d.SandboxID, Port: d.Port, URL: h.svc.CustomDomainURL(d.Hostname), CreatedAt: d.CreatedAt}
}

func (h *Handler) addDomain(w http.ResponseWriter, r *http.Request) {
	var req apitypes.DomainRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	d, added, err := h.svc.AddCustomDomain(r.Context(), r.PathValue("id"), req.Hostname, req.Port)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusOK
	if added {
		status = http.StatusCreated
	}
	api.WriteJSON(w, status, h.toDomain(d))
}

func (h *Handler) listDomains(w http.ResponseWriter, r *http.Request) {
	ds, err := h.svc.ListCustomDomains(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.DomainList{Domains: make([]apitypes.Domain, 0, len(ds))}
	for _, d := range ds {
		out.Domains = append(out.Domains, h.toDomain(d))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) removeDomain(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.RemoveCustomDomain(r.Context(), r.PathValue("id"), r.PathValue("hostname")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// poolStatus reports the warm pool's counters and free slots (admin only).
func (h *Handler) poolStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.svc.PoolStatus(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.WarmPoolStatus{Hits: st.Hits, Misses: st.Misses, Pools: []apitypes.Pool{},
		Auto: st.Auto, AutoMax: st.AutoMax, AutoTotal: st.AutoTotal, MemoryLimitMB: st.MemoryLimitMB}
	if !st.Auto {
		out.AutoMax, out.AutoTotal = 0, 0
	}
	for _, p := range st.Pools {
		out.Pools = append(out.Pools, apitypes.Pool{Image: p.Image, User: p.User, Size: p.Size, Ready: p.Ready, Starting: p.Starting, Auto: p.Auto})
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// updateNetwork serves PUT /v1/sandboxes/{id}/network: the body is the
// whole new policy (fields left out are cleared), applied to connections
// that start after the answer.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var n apitypes.Network
	if err := api.DecodeJSON(r, &n, true); err != nil {
		fail(w, err)
		return
	}
	sb, err := h.svc.UpdateNetwork(r.Context(), r.PathValue("id"), networkPolicy(&n))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

// resize serves PUT /v1/sandboxes/{id}/resources: new cpu and memory
// limits, applied to the container at once and kept for later starts.
func (h *Handler) resize(w http.ResponseWriter, r *http.Request) {
	var body apitypes.Resources
	if err := api.DecodeJSON(r, &body, true); err != nil {
		fail(w, err)
		return
	}
	sb, err := h.svc.ResizeSandbox(r.Context(), r.PathValue("id"), service.Resize{CPU: body.CPU, MemoryMB: body.MemoryMB})
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r.Context(), sb))
}

// networkDenied serves GET /v1/sandboxes/{id}/network/denied.
func (h *Handler) networkDenied(w http.ResponseWriter, r *http.Request) {
	rep, err := h.svc.NetworkDenials(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.NetworkDenied{Denied: make([]apitypes.Denial, 0, len(rep.Denied)), Total: rep.DeniedTotal, Learned: rep.Learned}
	for _, d := range rep.Denied {
		out.Denied = append(out.Denied, apitypes.Denial{Time: d.Time, Kind: d.Kind, Name: d.Name, Addr: d.Addr, Port: d.Port, Reason: d.Reason, Message: d.String()})
	}
	api.WriteJSON(w, http.StatusOK, out)
}
