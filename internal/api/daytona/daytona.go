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
	hub    *hub
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
		ctx:    ctx,
		svc:    svc,
		auth:   auth,
		prefix: opts.Prefix,
		log:    opts.Logger,
		mux:    http.NewServeMux(),
		hub:    newHub(),

		authTimeout: opts.AuthTimeout,
	}
	go h.relayEvents(ctx, svc.Subscribe(eventBuffer))
	p := h.prefix
	route := func(pattern string, f http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		h.mux.HandleFunc(method+" "+p+path, f)
	}
	route("POST /sandbox", h.create)
	route("GET /sandbox", h.list)
	route("GET /sandbox/{idOrName}", h.get)
	route("DELETE /sandbox/{idOrName}", h.delete)
	route("POST /sandbox/{idOrName}/start", h.start)
	route("POST /sandbox/{idOrName}/stop", h.stop)
	route("PUT /sandbox/{idOrName}/labels", h.setLabels)
	route("GET /sandbox/{idOrName}/toolbox-proxy-url", h.toolboxProxyURL)
	route("GET /sandbox/{idOrName}/ports/{port}/preview-url", h.previewURL)

	route("POST /toolbox/{id}/process/execute", h.execute)
	route("POST /toolbox/{id}/files/bulk-upload", h.bulkUpload)
	route("POST /toolbox/{id}/files/bulk-download", h.bulkDownload)
	route("GET /toolbox/{id}/files", h.listFiles)
	route("GET /toolbox/{id}/files/info", h.fileInfo)
	route("POST /toolbox/{id}/files/folder", h.createFolder)
	route("DELETE /toolbox/{id}/files", h.deleteFile)
	route("POST /toolbox/{id}/files/move", h.moveFile)
	route("GET /toolbox/{id}/user-home-dir", h.homeDir)
	route("GET /toolbox/{id}/work-dir", h.homeDir)

	h.mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "Cannot %s %s: Sandpit's Daytona facade does not implement this endpoint", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP authenticates and dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == h.prefix+"/socket.io/" || r.URL.Path == h.prefix+"/socket.io" {
		h.serveSocket(w, r)
		return
	}
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
