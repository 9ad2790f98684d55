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
	"github.com/sandpit-dev/sandpit/internal/service"
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
}

// Handler serves the facade. It is safe for concurrent use.
type Handler struct {
	// ctx is the daemon's lifetime: event sockets, which http.Server.Shutdown
	// does not track once hijacked, are closed when it ends.
	ctx    context.Context
	svc    *service.Service
	auth   *api.Auth
	prefix string
	log    *slog.Logger
	mux    *http.ServeMux
	// routes declares what each route does; see api.Routes.
	routes *api.Routes
	hub    *hub
	// res is the host's capacity, reported for resources a sandbox has no
	// limit on: without a limit it can use all of it.
	res hostResources
	// signKey signs preview URLs (see signed.go).
	signKey []byte
	// ptys remembers each PTY's size and environment.
	ptys *ptyTable
	// started is when the facade was made, the creation time reported for
	// the daemon's snapshots.
	started time.Time
	// interp serialises executions per interpreter context.
	interp interpLocks
	// authTimeout: see Options.AuthTimeout.
	authTimeout time.Duration
}

// New builds the facade. Every route but the event socket requires
// "Authorization: Bearer <token>"; the socket authenticates in its Socket.IO
// connect packet, as the SDK sends it there.
func New(ctx context.Context, svc *service.Service, auth *api.Auth, opts Options) *Handler {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	opts.Prefix = strings.TrimSuffix(opts.Prefix, "/")
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AuthTimeout <= 0 {
		opts.AuthTimeout = 10 * time.Second
	}
	h := &Handler{
		ctx:     ctx,
		svc:     svc,
		auth:    auth,
		prefix:  opts.Prefix,
		log:     opts.Logger,
		mux:     http.NewServeMux(),
		hub:     newHub(),
		res:     readHostResources(svc.Config().DiskMB),
		started: time.Now(),
		ptys:    newPTYTable(),
		signKey: signingKey(opts.PreviewKey),

		authTimeout: opts.AuthTimeout,
	}
	go h.relayEvents(ctx, svc.Subscribe(eventBuffer))
	p := h.prefix
	h.routes = api.NewRoutes(h.mux, writeProblem, nil).Mount(p)
	route := h.routes.Handle
	route("POST /sandbox", sandpit.ActionManage, h.create)
	route("GET /sandbox", sandpit.ActionRead, h.list)
	route("GET /sandbox/{idOrName}", sandpit.ActionRead, h.get)
	route("DELETE /sandbox/{idOrName}", sandpit.ActionManage, h.delete)
	route("POST /sandbox/{idOrName}/start", sandpit.ActionManage, h.start)
	route("POST /sandbox/{idOrName}/stop", sandpit.ActionManage, h.stop)
	route("PUT /sandbox/{idOrName}/labels", sandpit.ActionManage, h.setLabels)
	route("GET /sandbox/{idOrName}/toolbox-proxy-url", sandpit.ActionRead, h.toolboxProxyURL)
	route("GET /sandbox/{idOrName}/ports/{port}/preview-url", sandpit.ActionExpose, h.previewURL)
	route("POST /sandbox/{idOrName}/autostop/{interval}", sandpit.ActionManage, h.setInterval(sandpit.IntervalAutoStop))
	route("POST /sandbox/{idOrName}/autoarchive/{interval}", sandpit.ActionManage, h.setInterval(sandpit.IntervalAutoArchive))
	route("POST /sandbox/{idOrName}/autodelete/{interval}", sandpit.ActionManage, h.setInterval(sandpit.IntervalAutoDelete))
	route("POST /sandbox/{idOrName}/last-activity", sandpit.ActionManage, h.refreshActivity)
	route("GET /sandbox/{idOrName}/ports/{port}/signed-preview-url", sandpit.ActionExpose, h.signedPreviewURL)
	route("POST /sandbox/{idOrName}/ports/{port}/signed-preview-url/{token}/expire", sandpit.ActionExpose, h.expireSignedPreviewURL)

	route("POST /toolbox/{id}/process/execute", sandpit.ActionExecute, h.execute)
	route("POST /toolbox/{id}/files/bulk-upload", sandpit.ActionWriteFiles, h.bulkUpload)
	route("POST /toolbox/{id}/files/bulk-download", sandpit.ActionReadFiles, h.bulkDownload)
	route("GET /toolbox/{id}/files", sandpit.ActionReadFiles, h.listFiles)
	route("GET /toolbox/{id}/files/info", sandpit.ActionReadFiles, h.fileInfo)
	route("POST /toolbox/{id}/files/folder", sandpit.ActionWriteFiles, h.createFolder)
	route("DELETE /toolbox/{id}/files", sandpit.ActionWriteFiles, h.deleteFile)
	route("POST /toolbox/{id}/files/move", sandpit.ActionWriteFiles, h.moveFile)
	route("GET /toolbox/{id}/user-home-dir", sandpit.ActionRead, h.homeDir)
	route("GET /toolbox/{id}/work-dir", sandpit.ActionRead, h.homeDir)
	route("GET /toolbox/{id}/system/metrics", sandpit.ActionRead, h.systemMetrics)
	route("GET /toolbox/{id}/files/find", sandpit.ActionReadFiles, h.findFiles)
	route("GET /toolbox/{id}/files/search", sandpit.ActionReadFiles, h.searchFiles)
	route("POST /toolbox/{id}/files/replace", sandpit.ActionWriteFiles, h.replaceInFiles)
	route("POST /toolbox/{id}/files/permissions", sandpit.ActionWriteFiles, h.setFilePermissions)
	route("POST /toolbox/{id}/process/session", sandpit.ActionExecute, h.createSession)
	route("GET /toolbox/{id}/process/session", sandpit.ActionRead, h.listSessions)
	route("GET /toolbox/{id}/process/session/{sessionId}", sandpit.ActionRead, h.getSession)
	route("DELETE /toolbox/{id}/process/session/{sessionId}", sandpit.ActionExecute, h.deleteSession)
	route("POST /toolbox/{id}/process/session/{sessionId}/exec", sandpit.ActionExecute, h.sessionExec)
	route("GET /toolbox/{id}/process/session/{sessionId}/command/{commandId}", sandpit.ActionRead, h.getSessionCommand)
	route("GET /toolbox/{id}/process/session/{sessionId}/command/{commandId}/logs", sandpit.ActionReadFiles, h.getSessionCommandLogs)
	route("POST /toolbox/{id}/process/session/{sessionId}/command/{commandId}/input", sandpit.ActionExecute, h.sendSessionInput)
	route("GET /toolbox/{id}/process/pty/create-connect", sandpit.ActionExecute, h.createConnectPTY)
	route("POST /toolbox/{id}/process/pty", sandpit.ActionExecute, h.postPTY)
	route("GET /toolbox/{id}/process/pty", sandpit.ActionRead, h.listPTYs)
	route("GET /toolbox/{id}/process/pty/{sessionId}", sandpit.ActionRead, h.getPTY)
	route("DELETE /toolbox/{id}/process/pty/{sessionId}", sandpit.ActionExecute, h.killPTY)
	route("POST /toolbox/{id}/process/pty/{sessionId}/resize", sandpit.ActionExecute, h.resizePTY)
	route("GET /toolbox/{id}/process/pty/{sessionId}/connect", sandpit.ActionExecute, h.connectPTY)
	route("POST /toolbox/{id}/process/code-run", sandpit.ActionExecute, h.codeRun)
	route("POST /toolbox/{id}/process/interpreter/context", sandpit.ActionExecute, h.createInterpreterContext)
	route("GET /toolbox/{id}/process/interpreter/context", sandpit.ActionRead, h.listInterpreterContexts)
	route("DELETE /toolbox/{id}/process/interpreter/context/{contextId}", sandpit.ActionExecute, h.deleteInterpreterContext)
	route("GET /toolbox/{id}/process/interpreter/execute", sandpit.ActionExecute, h.executeInterpreter)
	route("POST /toolbox/{id}/lsp/start", sandpit.ActionExecute, h.lspHandler(h.lspStart))
	route("POST /toolbox/{id}/lsp/stop", sandpit.ActionExecute, h.lspHandler(h.lspStop))
	route("POST /toolbox/{id}/lsp/did-open", sandpit.ActionExecute, h.lspHandler(h.lspDidOpen))
	route("POST /toolbox/{id}/lsp/did-close", sandpit.ActionExecute, h.lspHandler(h.lspDidClose))
	route("GET /toolbox/{id}/lsp/document-symbols", sandpit.ActionExecute, h.lspHandler(h.lspDocumentSymbols))
	route("GET /toolbox/{id}/lsp/workspacesymbols", sandpit.ActionExecute, h.lspHandler(h.lspWorkspaceSymbols))
	route("POST /toolbox/{id}/lsp/completions", sandpit.ActionExecute, h.lspHandler(h.lspCompletions))
	route("POST /toolbox/{id}/git/clone", sandpit.ActionExecute, h.gitHandler(h.gitClone))
	route("POST /toolbox/{id}/git/init", sandpit.ActionExecute, h.gitHandler(h.gitInit))
	route("GET /toolbox/{id}/git/status", sandpit.ActionReadFiles, h.gitHandler(h.gitStatus))
	route("POST /toolbox/{id}/git/add", sandpit.ActionExecute, h.gitHandler(h.gitAdd))
	route("POST /toolbox/{id}/git/commit", sandpit.ActionExecute, h.gitHandler(h.gitCommit))
	route("GET /toolbox/{id}/git/branches", sandpit.ActionReadFiles, h.gitHandler(h.gitBranches))
	route("POST /toolbox/{id}/git/branches", sandpit.ActionExecute, h.gitHandler(h.gitCreateBranch))
	route("DELETE /toolbox/{id}/git/branches", sandpit.ActionExecute, h.gitHandler(h.gitDeleteBranch))
	route("POST /toolbox/{id}/git/checkout", sandpit.ActionExecute, h.gitHandler(h.gitCheckout))
	route("POST /toolbox/{id}/git/push", sandpit.ActionExecute, h.gitHandler(h.gitPush))
	route("POST /toolbox/{id}/git/pull", sandpit.ActionExecute, h.gitHandler(h.gitPull))
	route("POST /toolbox/{id}/git/reset", sandpit.ActionExecute, h.gitHandler(h.gitReset))
	route("POST /toolbox/{id}/git/restore", sandpit.ActionExecute, h.gitHandler(h.gitRestore))
	route("POST /toolbox/{id}/git/remotes", sandpit.ActionExecute, h.gitHandler(h.gitAddRemote))
	route("GET /toolbox/{id}/git/remotes", sandpit.ActionReadFiles, h.gitHandler(h.gitListRemotes))
	route("POST /toolbox/{id}/git/config", sandpit.ActionExecute, h.gitHandlerPath(h.gitSetConfig, false))
	route("GET /toolbox/{id}/git/config", sandpit.ActionReadFiles, h.gitHandlerPath(h.gitGetConfig, false))
	route("POST /toolbox/{id}/git/config/user", sandpit.ActionExecute, h.gitHandlerPath(h.gitConfigureUser, false))
	route("POST /toolbox/{id}/git/credentials", sandpit.ActionExecute, h.gitAuthenticate)
	route("GET /snapshots", sandpit.ActionRead, h.listSnapshots)
	route("GET /snapshots/{idOrName}", sandpit.ActionRead, h.getSnapshot)

	h.mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "Cannot %s %s: Sandpit's Daytona facade does not implement this endpoint", r.Method, r.URL.Path))
	})
	return h
}

// Routes lists the facade's routes, relative to its prefix, and their
// actions.
func (h *Handler) Routes() []api.Route { return h.routes.List() }

// ServeHTTP authenticates and dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == h.prefix+"/socket.io/" || r.URL.Path == h.prefix+"/socket.io" {
		h.serveSocket(w, r)
		return
	}
	// Toolbox answers carry what a sandbox wrote (files, command output)
	// on the API origin, which is the dashboard's: never sniffed, never a
	// page with this origin's rights.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	r, err := h.auth.Authorize(r, api.BearerToken(r))
	if err != nil {
		writeProblem(w, r, err)
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
func (h *Handler) toolboxBase(r *http.Request) string {
	return baseURL(r) + h.prefix + "/toolbox"
}
