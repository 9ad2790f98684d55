// Package daytona is Sandpit's Daytona-compatible facade: the control plane
// and the toolbox that the official Daytona SDKs call, plus the Socket.IO
// event socket they open. Users of Daytona switch by pointing DAYTONA_API_URL
// at http://HOST:PORT/daytona and using the daemon's token as the API key.
//
// The toolbox is translated onto the one in-sandbox protocol (the agent's
// Connect services and /files); there is no second protocol inside sandboxes.
package daytona

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// DefaultPrefix is the path the daemon mounts the facade under.
const DefaultPrefix = "/daytona"

// Options configures the handler; zero values take the defaults noted.
type Options struct {
	// Prefix is the mount path, without a trailing slash; default "/daytona".
	Prefix string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// AuthTimeout is how long an event socket may stay open without
	// authenticating; default 10 seconds.
	AuthTimeout time.Duration
	// PreviewKey is the secret signed preview URLs are derived from. The
	// daemon keeps it in a file, so URLs stay valid across restarts; empty
	// means a random key, so URLs end with the handler.
	PreviewKey []byte
	// DefaultTemplate is the template a create naming no snapshot, image or
	// build runs; empty means the daemon's default image.
	DefaultTemplate string
	// DefaultUser is the account such a sandbox acts as (falling back to
	// root where its image has no such account), as Daytona's default
	// image runs as "daytona".
	DefaultUser string
	// SSHAddr is the daemon's --ssh-listen address (empty: no SSH
	// endpoint), and SSHHost the host named in SSH commands when that
	// address is unspecified (0.0.0.0).
	SSHAddr, SSHHost string
	// LSPTimeout bounds one request to a language server; default 2
	// minutes, because a server's first request waits for it to load the
	// project.
	LSPTimeout time.Duration
	// Idempotency is the daemon's Idempotency-Key layer, which the keyed
	// routes run through; nil ignores the header.
	Idempotency *api.Idempotency
	// Templates is the template aggregate: snapshots, image builds and
	// their uploaded contexts.
	Templates TemplateBackend
}

// Handler serves the facade. It is safe for concurrent use. It only
// dispatches: each area of the facade (the control plane, the toolbox, the
// processes, the event socket) is its own type, which takes of the service
// layer only what it uses.
type Handler struct {
	*core
	auth *api.Auth
	mux  *http.ServeMux
	// routes declares what each route does; see api.Routes.
	routes *api.Routes

	sandboxes *sandboxAPI
	toolbox   *toolboxAPI
	processes *processAPI
	events    *eventAPI
	storage   *objectStore
}

// core is what every area shares: the daemon's lifetime, the agent access
// all but the control plane use, and the state more than one area reads.
type core struct {
	// ctx is the daemon's lifetime: event sockets, which http.Server.Shutdown
	// does not track once hijacked, are closed when it ends.
	ctx    context.Context
	svc    AgentBackend
	prefix string
	log    *slog.Logger
	// res is the host's capacity, reported for resources a sandbox has no
	// limit on: without a limit it can use all of it.
	res hostResources
	// ptys remembers each PTY's size and environment.
	ptys *ptyTable
	// interp serialises executions per interpreter context.
	interp interpLocks
}

// sandboxAPI is the control plane: sandboxes, their previews, snapshots.
type sandboxAPI struct {
	*core
	svc SandboxBackend
	// tpl is the caller's templates: the snapshots it builds.
	tpl TemplateBackend
	// pending holds the creates that build their image first.
	pending *pendingCreates
	// signKey signs preview URLs (see signed.go).
	signKey []byte
	// defaultTemplate is what a create naming no image runs, and
	// templateUser the account its sandboxes act as (see Options).
	defaultTemplate, templateUser string
	// sshAddr and sshHost are where SSH access tokens log in (see Options).
	sshAddr, sshHost string
	// started is when the facade was made, the creation time reported for
	// the daemon's snapshots.
	started time.Time
}

// toolboxAPI is the toolbox's files, git, LSP, one-shot execution and
// metrics.
type toolboxAPI struct {
	*core
	svc ToolboxBackend
	// lspTimeout bounds one language-server request (see Options).
	lspTimeout time.Duration
}

// processAPI is the toolbox's long-lived processes: sessions, PTYs, code
// runs and interpreter contexts.
type processAPI struct {
	*core
	svc ProcessBackend
	// auth opens the sessions of the streams, under the credential it
	// authenticated.
	auth *api.Auth
}

// eventAPI is the Socket.IO event socket.
type eventAPI struct {
	*core
	svc  EventBackend
	auth *api.Auth
	// sandboxes renders the sandboxes state changes carry.
	sandboxes *sandboxAPI
	hub       *hub
	// authTimeout: see Options.AuthTimeout.
	authTimeout time.Duration
}

// New builds the facade. Every route but the event socket requires
// "Authorization: Bearer <token>"; the socket authenticates in its Socket.IO
// connect packet, as the SDK sends it there.
func New(ctx context.Context, svc Backend, auth *api.Auth, opts Options) *Handler {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	opts.Prefix = strings.TrimSuffix(opts.Prefix, "/")
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LSPTimeout <= 0 {
		opts.LSPTimeout = defaultLSPTimeout
	}
	if opts.AuthTimeout <= 0 {
		opts.AuthTimeout = 10 * time.Second
	}
	c := &core{
		ctx:    ctx,
		svc:    svc,
		prefix: opts.Prefix,
		log:    opts.Logger,
		res:    readHostResources(svc.Config().MaxDiskMB()),
		ptys:   newPTYTable(),
	}
	h := &Handler{
		core: c,
		auth: auth,
		mux:  http.NewServeMux(),
		sandboxes: &sandboxAPI{core: c, svc: svc, tpl: opts.Templates, pending: newPendingCreates(), signKey: signingKey(opts.PreviewKey), started: time.Now(),
			defaultTemplate: opts.DefaultTemplate, templateUser: opts.DefaultUser,
			sshAddr: opts.SSHAddr, sshHost: opts.SSHHost},
		toolbox:   &toolboxAPI{core: c, svc: svc, lspTimeout: opts.LSPTimeout},
		processes: &processAPI{core: c, svc: svc, auth: auth},
	}
	h.storage = newObjectStore(h.sandboxes.signKey, opts.Templates, opts.Prefix)
	h.events = &eventAPI{core: c, svc: svc, auth: auth, sandboxes: h.sandboxes, hub: newHub(), authTimeout: opts.AuthTimeout}
	go h.events.relayEvents(ctx, svc.Events().Subscribe(eventBuffer))
	p := h.prefix
	// Daytona's keys are the native API's (printable ASCII), its refusals
	// Daytona's error shape.
	h.routes = api.NewRoutes(h.mux, WriteError, nil).Mount(p).Keyed(opts.Idempotency.For(keyScope, api.KeyPrintable, WriteError))
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	vols := &volumeAPI{svc: svc.Volumes()}
	keyed("POST /volumes", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, vols.create)
	route("GET /volumes", sandpit.ActionRead, vols.list)
	route("GET /volumes/by-name/{name}", sandpit.ActionRead, vols.getByName)
	route("GET /volumes/{volumeId}", sandpit.ActionRead, vols.get)
	keyed("DELETE /volumes/{volumeId}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, vols.delete)
	keyed("POST /sandbox", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate}, h.sandboxes.create)
	route("GET /sandbox", sandpit.ActionRead, h.sandboxes.list)
	route("GET /sandbox/{idOrName}", sandpit.ActionRead, h.sandboxes.get)
	keyed("DELETE /sandbox/{idOrName}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.delete)
	keyed("POST /sandbox/{idOrName}/start", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.start)
	keyed("POST /sandbox/{idOrName}/stop", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.stop)
	keyed("POST /sandbox/{idOrName}/archive", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.archive)
	route("PUT /sandbox/{idOrName}/labels", sandpit.ActionManage, h.sandboxes.setLabels)
	keyed("POST /sandbox/{idOrName}/fork", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate}, h.sandboxes.fork)
	keyed("POST /sandbox/{idOrName}/snapshot", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate, Prefix: templates.IDPrefix}, h.sandboxes.snapshot)
	route("GET /sandbox/{idOrName}/toolbox-proxy-url", sandpit.ActionRead, h.sandboxes.toolboxProxyURL)
	route("GET /sandbox/{idOrName}/ports/{port}/preview-url", sandpit.ActionExpose, h.sandboxes.previewURL)
	route("POST /sandbox/{idOrName}/autostop/{interval}", sandpit.ActionManage, h.sandboxes.setInterval(sandpit.IntervalAutoStop))
	route("POST /sandbox/{idOrName}/autoarchive/{interval}", sandpit.ActionManage, h.sandboxes.setInterval(sandpit.IntervalAutoArchive))
	route("POST /sandbox/{idOrName}/autodelete/{interval}", sandpit.ActionManage, h.sandboxes.setInterval(sandpit.IntervalAutoDelete))
	keyed("POST /sandbox/{idOrName}/network-settings", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.updateNetwork)
	keyed("POST /sandbox/{idOrName}/resize", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.resize)
	keyed("POST /sandbox/{idOrName}/ssh-access", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.sandboxes.createSSHAccess)
	keyed("DELETE /sandbox/{idOrName}/ssh-access", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.sandboxes.revokeSSHAccess)
	route("GET /sandbox/ssh-access/validate", sandpit.ActionRead, h.sandboxes.validateSSHAccess)
	route("POST /sandbox/{idOrName}/last-activity", sandpit.ActionManage, h.sandboxes.refreshActivity)
	route("GET /sandbox/{idOrName}/ports/{port}/signed-preview-url", sandpit.ActionExpose, h.sandboxes.signedPreviewURL)
	route("POST /sandbox/{idOrName}/ports/{port}/signed-preview-url/{token}/expire", sandpit.ActionExpose, h.sandboxes.expireSignedPreviewURL)

	route("POST /toolbox/{id}/process/execute", sandpit.ActionExecute, h.toolbox.execute)
	route("POST /toolbox/{id}/files/bulk-upload", sandpit.ActionWriteFiles, h.toolbox.bulkUpload)
	route("POST /toolbox/{id}/files/bulk-download", sandpit.ActionReadFiles, h.toolbox.bulkDownload)
	route("GET /toolbox/{id}/files/download", sandpit.ActionReadFiles, h.toolbox.download)
	route("POST /toolbox/{id}/files/upload-v2", sandpit.ActionWriteFiles, h.toolbox.uploadOne)
	route("GET /sandbox/{idOrName}/signing-key", sandpit.ActionWriteFiles, h.sandboxes.signingKey)
	route("POST /sandbox/{idOrName}/signing-key/rotate", sandpit.ActionWriteFiles, h.sandboxes.rotateSigningKey)
	route("GET /toolbox/{id}/files", sandpit.ActionReadFiles, h.toolbox.listFiles)
	route("GET /toolbox/{id}/files/info", sandpit.ActionReadFiles, h.toolbox.fileInfo)
	route("POST /toolbox/{id}/files/folder", sandpit.ActionWriteFiles, h.toolbox.createFolder)
	route("DELETE /toolbox/{id}/files", sandpit.ActionWriteFiles, h.toolbox.deleteFile)
	route("POST /toolbox/{id}/files/move", sandpit.ActionWriteFiles, h.toolbox.moveFile)
	route("GET /toolbox/{id}/user-home-dir", sandpit.ActionRead, h.toolbox.homeDir)
	route("GET /toolbox/{id}/work-dir", sandpit.ActionRead, h.toolbox.homeDir)
	route("GET /toolbox/{id}/system/metrics", sandpit.ActionRead, h.toolbox.systemMetrics)
	route("GET /toolbox/{id}/files/find", sandpit.ActionReadFiles, h.toolbox.findFiles)
	route("GET /toolbox/{id}/files/search", sandpit.ActionReadFiles, h.toolbox.searchFiles)
	route("POST /toolbox/{id}/files/replace", sandpit.ActionWriteFiles, h.toolbox.replaceInFiles)
	route("POST /toolbox/{id}/files/permissions", sandpit.ActionWriteFiles, h.toolbox.setFilePermissions)
	route("POST /toolbox/{id}/process/session", sandpit.ActionExecute, h.processes.createSession)
	route("GET /toolbox/{id}/process/session", sandpit.ActionRead, h.processes.listSessions)
	route("GET /toolbox/{id}/process/session/{sessionId}", sandpit.ActionRead, h.processes.getSession)
	route("DELETE /toolbox/{id}/process/session/{sessionId}", sandpit.ActionExecute, h.processes.deleteSession)
	route("POST /toolbox/{id}/process/session/{sessionId}/exec", sandpit.ActionExecute, h.processes.sessionExec)
	route("GET /toolbox/{id}/process/session/{sessionId}/command/{commandId}", sandpit.ActionRead, h.processes.getSessionCommand)
	route("GET /toolbox/{id}/process/session/{sessionId}/command/{commandId}/logs", sandpit.ActionReadFiles, h.processes.getSessionCommandLogs)
	route("POST /toolbox/{id}/process/session/{sessionId}/command/{commandId}/input", sandpit.ActionExecute, h.processes.sendSessionInput)
	route("GET /toolbox/{id}/process/pty/create-connect", sandpit.ActionExecute, h.processes.createConnectPTY)
	route("POST /toolbox/{id}/process/pty", sandpit.ActionExecute, h.processes.postPTY)
	route("GET /toolbox/{id}/process/pty", sandpit.ActionRead, h.processes.listPTYs)
	route("GET /toolbox/{id}/process/pty/{sessionId}", sandpit.ActionRead, h.processes.getPTY)
	route("DELETE /toolbox/{id}/process/pty/{sessionId}", sandpit.ActionExecute, h.processes.killPTY)
	route("POST /toolbox/{id}/process/pty/{sessionId}/resize", sandpit.ActionExecute, h.processes.resizePTY)
	route("GET /toolbox/{id}/process/pty/{sessionId}/connect", sandpit.ActionExecute, h.processes.connectPTY)
	route("POST /toolbox/{id}/process/code-run", sandpit.ActionExecute, h.processes.codeRun)
	route("POST /toolbox/{id}/process/interpreter/context", sandpit.ActionExecute, h.processes.createInterpreterContext)
	route("GET /toolbox/{id}/process/interpreter/context", sandpit.ActionRead, h.processes.listInterpreterContexts)
	route("DELETE /toolbox/{id}/process/interpreter/context/{contextId}", sandpit.ActionExecute, h.processes.deleteInterpreterContext)
	route("GET /toolbox/{id}/process/interpreter/execute", sandpit.ActionExecute, h.processes.executeInterpreter)
	route("POST /toolbox/{id}/lsp/start", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspStart))
	route("POST /toolbox/{id}/lsp/stop", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspStop))
	route("POST /toolbox/{id}/lsp/did-open", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspDidOpen))
	route("POST /toolbox/{id}/lsp/did-close", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspDidClose))
	route("GET /toolbox/{id}/lsp/document-symbols", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspDocumentSymbols))
	route("GET /toolbox/{id}/lsp/workspacesymbols", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspWorkspaceSymbols))
	route("POST /toolbox/{id}/lsp/completions", sandpit.ActionExecute, h.toolbox.lspHandler(h.toolbox.lspCompletions))
	route("POST /toolbox/{id}/git/clone", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitClone))
	route("POST /toolbox/{id}/git/init", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitInit))
	route("GET /toolbox/{id}/git/status", sandpit.ActionReadFiles, h.toolbox.gitHandler(h.toolbox.gitStatus))
	route("POST /toolbox/{id}/git/add", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitAdd))
	route("POST /toolbox/{id}/git/commit", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitCommit))
	route("GET /toolbox/{id}/git/branches", sandpit.ActionReadFiles, h.toolbox.gitHandler(h.toolbox.gitBranches))
	route("POST /toolbox/{id}/git/branches", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitCreateBranch))
	route("DELETE /toolbox/{id}/git/branches", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitDeleteBranch))
	route("POST /toolbox/{id}/git/checkout", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitCheckout))
	route("POST /toolbox/{id}/git/push", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitPush))
	route("POST /toolbox/{id}/git/pull", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitPull))
	route("POST /toolbox/{id}/git/reset", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitReset))
	route("POST /toolbox/{id}/git/restore", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitRestore))
	route("POST /toolbox/{id}/git/remotes", sandpit.ActionExecute, h.toolbox.gitHandler(h.toolbox.gitAddRemote))
	route("GET /toolbox/{id}/git/remotes", sandpit.ActionReadFiles, h.toolbox.gitHandler(h.toolbox.gitListRemotes))
	route("POST /toolbox/{id}/git/config", sandpit.ActionExecute, h.toolbox.gitHandlerPath(h.toolbox.gitSetConfig, false))
	route("GET /toolbox/{id}/git/config", sandpit.ActionReadFiles, h.toolbox.gitHandlerPath(h.toolbox.gitGetConfig, false))
	route("POST /toolbox/{id}/git/config/user", sandpit.ActionExecute, h.toolbox.gitHandlerPath(h.toolbox.gitConfigureUser, false))
	route("POST /toolbox/{id}/git/credentials", sandpit.ActionExecute, h.toolbox.gitAuthenticate)
	h.computerUseRoutes(route)
	route("GET /snapshots", sandpit.ActionRead, h.sandboxes.listSnapshots)
	route("GET /snapshots/{idOrName}", sandpit.ActionRead, h.sandboxes.getSnapshot)
	// A build runs the caller's commands on the engine, so it takes the
	// execute action, as the native API's builds do.
	keyed("POST /snapshots", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.sandboxes.createSnapshot)
	keyed("DELETE /snapshots/{idOrName}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.sandboxes.deleteSnapshot)
	route("POST /snapshots/{idOrName}/activate", sandpit.ActionManage, h.sandboxes.activateSnapshot)
	route("GET /snapshots/{idOrName}/build-logs-url", sandpit.ActionRead, h.sandboxes.snapshotBuildLogsURL)
	route("GET /snapshots/{idOrName}/build-logs", sandpit.ActionRead, h.sandboxes.snapshotBuildLogs)
	route("GET /sandbox/{idOrName}/build-logs-url", sandpit.ActionRead, h.sandboxes.sandboxBuildLogsURL)
	route("GET /sandbox/{idOrName}/build-logs", sandpit.ActionRead, h.sandboxes.sandboxBuildLogs)
	route("GET /object-storage/push-access", sandpit.ActionExecute, h.storage.pushAccess)
	h.forwarding()

	h.mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, newProblem(http.StatusNotFound, "Cannot %s %s: Sandpit's Daytona facade does not implement this endpoint", r.Method, r.URL.Path))
	})
	return h
}

// Routes lists the facade's routes, relative to its prefix, and their
// actions.
func (h *Handler) Routes() []api.Route { return h.routes.List() }

// Forwarded is every route as a cluster's gateway reads it (see
// api.Forwarding).
func (h *Handler) Forwarded() []api.Route { return h.routes.Forwarded() }

// ServeHTTP authenticates and dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == h.prefix+"/socket.io/" || r.URL.Path == h.prefix+"/socket.io" {
		h.events.serveSocket(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, h.prefix+storagePath+"/") {
		// The SDK's S3 client sends no bearer token: the object store
		// authenticates its session token itself.
		h.storage.ServeHTTP(w, r)
		return
	}
	// Toolbox answers carry what a sandbox wrote (files, command output)
	// on the API origin, which is the dashboard's: never sniffed, never a
	// page with this origin's rights.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	if sr, ok := h.signed(w, r); ok {
		if sr != nil {
			h.mux.ServeHTTP(w, sr)
		}
		return
	}
	r, err := h.auth.Authorize(r, api.BearerToken(r))
	if err != nil {
		WriteError(w, r, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// baseURL is the scheme and host the client used to reach this request,
// so that URLs handed back (toolboxProxyUrl) work from where the client is.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	// A TLS-terminating proxy in front of the daemon says so here; only the
	// two meaningful values are taken, so the header cannot inject anything.
	switch strings.ToLower(r.Header.Get("X-Forwarded-Proto")) {
	case "https":
		scheme = "https"
	case "http":
		scheme = "http"
	}
	return scheme + "://" + r.Host
}

// toolboxBase is the toolboxProxyUrl for a request.
func (h *core) toolboxBase(r *http.Request) string {
	return baseURL(r) + h.prefix + "/toolbox"
}
