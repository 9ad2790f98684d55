// Package e2b is the E2B-compatible facade: the control plane the official
// e2b SDKs call (E2B_API_URL=http://HOST:PORT/e2b) and the sandbox gateway
// they send agent ("envd") calls to (E2B_SANDBOX_URL=http://HOST:PORT/e2b/envd).
// It translates E2B's wire shapes to the service's operations; the one error
// classification is api.Classify, rendered in E2B's {"code","message"} shape.
package e2b

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/agentrelay"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// Prefix is where the daemon mounts the facade.
const Prefix = "/e2b"

// Backend is what the facade needs of the service layer; *service.Service
// implements it. The facade's own tests put a fake in its place so that the
// create dedupe can be exercised without Docker.
type Backend interface {
	ResolveImage(image, template string) (string, error)
	CreateSandbox(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, error)
	CreateOrAdopt(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, bool, error)
	GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error)
	DeleteSandbox(ctx context.Context, id string) error
	// Volumes is the volumes aggregate, which /volumes serves.
	Volumes() *volumes.Service
	PauseSandbox(ctx context.Context, id string, mode sandpit.PauseMode) (sandpit.Sandbox, error)
	StartSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	StopSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	// WakeOnTraffic resumes a paused sandbox made with auto-resume for a
	// request through the gateway.
	WakeOnTraffic(ctx context.Context, id string) (service.WakeOutcome, error)
	SetTimeout(ctx context.Context, id string, timeout time.Duration) (sandpit.Sandbox, error)
	UpdateNetwork(ctx context.Context, id string, p sandpit.NetworkPolicy) (sandpit.Sandbox, error)
	Stats(ctx context.Context, id string) (sandpit.Stats, error)
	AgentAddr(ctx context.Context, id string) (string, error)
	// AgentHTTP is the client of the daemon's calls to the agents, whose
	// transport the relay to the sandboxes' agents and servers shares.
	AgentHTTP() *agentapi.Link
	CheckPortAccess(ctx context.Context, sb sandpit.Sandbox, port int, trafficToken string) error
	// SignedFilesSandbox finds, without a store query, the running sandbox
	// whose token signed a /files URL ("" for none).
	SignedFilesSandbox(method string, q url.Values) string
	// SandboxKnown says, without a store query, whether a sandbox exists.
	SandboxKnown(id string) bool
}

var _ Backend = (*service.Service)(nil)

// Config configures the facade.
type Config struct {
	// Templates is the template aggregate the Template API and snapshots
	// go through; nil answers them 501.
	Templates TemplateBackend
	// Token is the daemon's admin token, used when Auth is nil (unit tests).
	Token string
	// Auth authenticates X-API-KEY: the admin token or a personal access
	// token, whose owner scopes what the request sees and makes.
	Auth *api.Auth
	// Domain is the create response's domain. Without E2B_SANDBOX_URL the
	// SDK reaches a sandbox's agent at 49983-<id>.<domain>, which the
	// daemon's proxy listener routes; see DomainFor.
	Domain string
	// PendingTTL is how long an in-flight create holds its claim before a
	// duplicate may take it over (default 2 minutes).
	PendingTTL time.Duration
	// ReplayWindow is how long an identical create (the same body from the
	// same key, without an Idempotency-Key) replays the sandbox the first
	// one made. Zero turns this fingerprint merge off; creates that send an
	// Idempotency-Key are deduplicated all the same.
	ReplayWindow time.Duration
	// Keys is the daemon's Idempotency-Key layer, which the keyed routes
	// other than the create run through; its retention is how long a keyed
	// create is replayed. Nil ignores the header on those routes.
	Keys *api.Idempotency
	// KeyRetention is how long a keyed create's answer is replayed
	// (default 24 hours, the daemon's --idempotency-retention).
	KeyRetention time.Duration
	// WaitBudget bounds how long a duplicate waits for an in-flight create
	// before it answers 429 with Retry-After, which the SDK retries by
	// itself. The default, the pending TTL capped at 30 seconds, is half the
	// SDK's default request timeout, so the 429 reaches the SDK and its
	// retry still fits within the caller's deadline.
	WaitBudget time.Duration
	// DiskSizeMB is the writable-layer limit every sandbox gets, reported
	// as diskSizeMB; 0 when the engine cannot enforce one.
	DiskSizeMB int64
	Logger     *slog.Logger
	Now        func() time.Time
	// Metrics is the daemon's sample history, which getMetrics windows
	// select from; nil answers only the current sample.
	Metrics *service.MetricsHistory
	// NodeName is this daemon's cluster node name, reported as clientID;
	// "" outside a cluster.
	NodeName string
	// Secrets is the secrets aggregate /secrets serves; nil answers those
	// routes 501.
	Secrets *secrets.Service
	// UploadKey is the daemon's secret the Template API's upload URLs are
	// signed with (a key derived from it); nil makes a key for this
	// process only.
	UploadKey []byte
}

// DomainFor returns the domain to report for a proxy listening on proxyPort:
// the port is part of it unless it is the default HTTP or HTTPS port, since
// the SDK appends nothing to "<port>-<id>.<domain>".
func DomainFor(domain string, proxyPort int) string {
	if proxyPort == 0 || proxyPort == 80 || proxyPort == 443 {
		return domain
	}
	return domain + ":" + strconv.Itoa(proxyPort)
}

// Handler serves everything under /e2b.
type Handler struct {
	be   Backend
	vols *volumes.Service
	idem *idempotency.Engine
	cfg  Config
	log  *slog.Logger
	mux  *http.ServeMux
	// routes declares what each control-plane route does; see api.Routes.
	routes *api.Routes
	// tpl is the template core the Template API builds through (nil when
	// the backend has none); uploadKey signs its upload URLs.
	tpl       TemplateBackend
	uploadKey []byte
	// relay carries the sandbox gateway's requests to the sandboxes.
	relay *agentrelay.Relay
}

// Routes lists the control plane's routes, relative to /e2b, and their
// actions. The sandbox gateway (/e2b/envd) is not among them: it is
// authenticated by each sandbox's own access token.
func (h *Handler) Routes() []api.Route { return h.routes.List() }

// Forwarded is every route under Prefix as a cluster's gateway reads it
// (see api.Forwarding); RootRoutes has the others.
func (h *Handler) Forwarded() []api.Route { return h.routes.Forwarded() }

// New builds the facade over the service (be), deduplicating creates through
// the service's idempotency engine.
func New(be Backend, idem *idempotency.Engine, cfg Config) *Handler {
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = 2 * time.Minute
	}
	if cfg.WaitBudget <= 0 {
		cfg.WaitBudget = min(cfg.PendingTTL, 30*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeyRetention <= 0 {
		cfg.KeyRetention = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Domain == "" {
		cfg.Domain = "localhost"
	}
	if cfg.Auth == nil {
		cfg.Auth = api.NewAuth(nil, cfg.Token)
	}
	h := &Handler{
		be:        be,
		vols:      be.Volumes(),
		idem:      idem,
		cfg:       cfg,
		log:       cfg.Logger.With("surface", "e2b"),
		mux:       http.NewServeMux(),
		uploadKey: uploadKeyFrom(cfg.UploadKey),
		relay:     agentrelay.New(be.AgentHTTP().Transport()),
	}
	h.tpl = cfg.Templates
	// E2B's keys are the syntax its SDK documents for idempotencyKey, its
	// refusals E2B's error shape.
	h.routes = api.NewRoutes(h.mux, func(w http.ResponseWriter, _ *http.Request, err error) { fail(w, err, "") }, nil).
		Keyed(cfg.Keys.For(keyScope, api.KeyE2B, WriteError))
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	// The v2 routes are what SDK 2.x calls; the unversioned ones are what
	// older SDKs (and E2B's own v1 API) call for the same operations.
	keyed("POST /volumes", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.createVolume)
	route("GET /volumes", sandpit.ActionRead, h.listVolumes)
	route("GET /volumes/{volumeID}", sandpit.ActionRead, h.getVolume)
	keyed("DELETE /volumes/{volumeID}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteVolume)
	keyed("POST /v2/sandboxes", sandpit.ActionManage, api.Keying{Mode: api.KeyedByHandler}, h.create)
	keyed("POST /sandboxes", sandpit.ActionManage, api.Keying{Mode: api.KeyedByHandler}, h.create)
	route("GET /v2/sandboxes", sandpit.ActionRead, h.list)
	route("GET /sandboxes", sandpit.ActionRead, h.listV1)
	// The detail carries the sandbox's envd access token only for a
	// principal that may execute (see SandboxDetail).
	route("GET /sandboxes/{id}", sandpit.ActionRead, h.get)
	keyed("DELETE /sandboxes/{id}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.kill)
	route("POST /sandboxes/{id}/timeout", sandpit.ActionManage, h.setTimeout)
	keyed("PUT /sandboxes/{id}/network", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.updateNetwork)
	route("POST /sandboxes/{id}/refreshes", sandpit.ActionManage, h.refresh)
	// A connect answers with the envd access token, which runs code.
	route("POST /v2/sandboxes/{id}/connect", sandpit.ActionExecute, h.connect)
	route("POST /sandboxes/{id}/connect", sandpit.ActionExecute, h.connect)
	route("POST /sandboxes/{id}/resume", sandpit.ActionManage, h.resume)
	keyed("POST /sandboxes/{id}/pause", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.pause)
	route("GET /sandboxes/{id}/metrics", sandpit.ActionRead, h.metrics)
	h.templateRoutes()
	h.snapshotRoutes()
	h.secretRoutes()
	h.forwarding()
	m := h.mux
	// Any other path is an E2B feature sandpit lacks (logs, say). It answers 501, not
	// 404: the SDK reads a 404 on a sandbox path as "sandbox not found",
	// which would misreport a missing feature as a missing sandbox.
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "not implemented by sandpit: "+r.Method+" "+Prefix+r.URL.Path)
	})
	return h
}

// ServeHTTP strips /e2b and dispatches: /envd/... is the sandbox gateway,
// authenticated by the sandbox's own access token (checked by its agent);
// everything else is the control plane, authenticated by X-API-KEY.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	if strings.HasPrefix(rest, "/volumecontent/") {
		// The volume content API (Volume.list/read/write) is not served, and
		// its calls carry a volume token rather than an API key: they are
		// answered before authentication. A volume's files are reached
		// through a sandbox that mounts it.
		writeError(w, http.StatusNotImplemented, "the volume content API is not implemented by sandpit: mount the volume in a sandbox and use its filesystem ("+r.Method+" "+r.URL.Path+")")
		return
	}
	if rest == "/envd" || strings.HasPrefix(rest, "/envd/") {
		h.gateway(w, r, strings.TrimPrefix(rest, "/envd"))
		return
	}
	var err error
	if r.Method == http.MethodPut && r.URL.Query().Has(paramUploadSig) {
		// A Template API upload URL: the SDK sends no API key with it,
		// and its signature says which owner it acts for.
		r, err = h.signedUpload(r, rest)
	} else {
		r, err = h.cfg.Auth.Authorize(r, r.Header.Get("X-API-KEY"))
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = rest
	r2.URL.RawPath = ""
	h.mux.ServeHTTP(w, r2)
}

func (h *Handler) now() time.Time { return h.cfg.Now().UTC() }

// fail renders err with WriteError. A missing sandbox gets a plain message
// naming it, since the SDK shows the message to the user.
func fail(w http.ResponseWriter, err error, id string) {
	if id != "" && errors.Is(err, sandpit.ErrNotFound) {
		writeError(w, http.StatusNotFound, "sandbox "+id+" not found")
		return
	}
	WriteError(w, nil, err)
}

// writeError writes E2B's error body for an answer already decided.
func writeError(w http.ResponseWriter, status int, msg string) {
	api.WriteJSON(w, status, ErrorBody{Code: status, Message: msg})
}

// WriteError renders err in E2B's error shape with the status of
// api.Classify: the E2B surface's one error renderer, which the cluster's
// gateway also calls for the requests it refuses before they reach this
// handler. E2B's shape names no path, so r is not read and may be nil.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p := api.Classify(err)
	if ra := p.RetryAfter(); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	writeError(w, p.Status, p.Message)
}

// WriteNotRunning answers a request for a sandbox that is gone or does not
// run as E2B's edge does, whichever way it came in (the gateway or the
// sandbox's https://<port>-<id>.<domain> host): 502 in E2B's error shape,
// which the SDK reads as "the sandbox is not running" (isRunning is false,
// and a call cut off by a kill is its TimeoutError).
func WriteNotRunning(w http.ResponseWriter, id string, state sandpit.State) {
	if state == "" {
		writeError(w, http.StatusBadGateway, "sandbox "+id+" not found")
		return
	}
	writeError(w, http.StatusBadGateway, "sandbox "+id+" is not running (state "+string(state)+")")
}
