// Package agent is Sandpit's in-sandbox agent. It runs as PID 1 inside every
// sandbox container and speaks the E2B "envd" wire protocol (see
// shared/protocols/e2b.md): the Connect services process.Process and
// filesystem.Filesystem, plus plain-HTTP /files and /health. The daemon, the
// native API and both facades all reach a sandbox through this one protocol.
//
// The agent is the server side of the contract in internal/agentapi (its
// port, headers, environment and init call). It may import that contract,
// the generated protocol packages (proto/...) and the shared leaf
// filesig; nothing of the daemon, since it runs inside the sandbox.
package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/filesig"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

const (
	// DefaultKeepaliveInterval is how long a stream may stay silent before the
	// agent sends a keepalive event. Proxies and load balancers commonly cut
	// idle connections after 30-60 s, so this stays well below that.
	DefaultKeepaliveInterval = 5 * time.Second
)

// DefaultListen is the address the agent listens on: every interface, on
// the contract's port.
func DefaultListen() string { return ":" + strconv.Itoa(agentapi.Port) }

// Config configures the agent's HTTP handler and server.
type Config struct {
	// Listen is the TCP address to serve on; empty means DefaultListen().
	Listen string
	// Token is the access token every request but GET /health must present in
	// the X-Access-Token header. Empty disables authentication.
	Token string
	// Env is the default environment of every process the agent starts;
	// per-request environment variables are laid over it.
	Env map[string]string
	// Logger receives the agent's logs; nil means slog.Default().
	Logger *slog.Logger
	// KeepaliveInterval is how long a stream may stay silent before a
	// keepalive event is sent; zero means DefaultKeepaliveInterval.
	KeepaliveInterval time.Duration
	// DefaultUser is the account processes and file operations act as when
	// a request names none; empty, or a name the image lacks, means root.
	DefaultUser string
	// EtcDir holds the passwd and group files users are looked up in;
	// empty means /etc.
	EtcDir string
}

// withDefaults returns a copy of cfg with every unset field filled in, so that
// the rest of the package never has to check for zero values.
func (cfg Config) withDefaults() Config {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.EtcDir == "" {
		cfg.EtcDir = "/etc"
	}
	// The map is copied so that a caller mutating its map later cannot race
	// with processes being started.
	cfg.Env = maps.Clone(cfg.Env)
	if cfg.Env == nil {
		cfg.Env = map[string]string{}
	}
	return cfg
}

// agent holds what every handler shares: the configuration, the table of
// running processes and the registry of polling filesystem watchers.
type agent struct {
	cfg      Config
	log      *slog.Logger
	errw     *connect.ErrorWriter
	procs    *procTable
	watchers *watcherRegistry
	accounts accounts
	set      *settings
}

// NewHandler returns the agent's complete HTTP surface: the Connect services
// process.Process and filesystem.Filesystem, GET/POST /files and GET /health,
// all behind the access-token check.
func NewHandler(cfg Config) http.Handler {
	cfg = cfg.withDefaults()
	a := &agent{
		cfg:      cfg,
		log:      cfg.Logger,
		errw:     connect.NewErrorWriter(),
		procs:    newProcTable(),
		watchers: newWatcherRegistry(),
		accounts: accounts{etc: cfg.EtcDir},
		set:      &settings{token: cfg.Token, env: maps.Clone(cfg.Env), user: cfg.DefaultUser},
	}

	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(&processService{a: a}))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{a: a}))
	mux.HandleFunc("GET "+agentapi.HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+agentapi.InitPath, a.init)
	mux.HandleFunc("GET "+agentapi.FilesPath, a.readFile)
	mux.HandleFunc("POST "+agentapi.FilesPath, a.writeFiles)
	// Older E2B SDKs upload with PUT; accepting it costs nothing.
	mux.HandleFunc("PUT "+agentapi.FilesPath, a.writeFiles)
	return a.authenticate(mux)
}

// Run serves the agent on cfg.Listen until ctx is done, then shuts down
// gracefully, giving in-flight requests a few seconds to finish.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("agent: listen on %s: %w", cfg.Listen, err)
	}
	return serve(ctx, ln, cfg)
}

// serve runs the HTTP server on ln until ctx is done.
func serve(ctx context.Context, ln net.Listener, cfg Config) error {
	// E2B SDKs speak HTTP/1.1; unencrypted HTTP/2 is enabled too so that gRPC
	// clients and the daemon's proxy can multiplex streams over one connection.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           NewHandler(cfg),
		ReadHeaderTimeout: 10 * time.Second,
		Protocols:         &protocols,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	cfg.Logger.Info("agent listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("agent: serve: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Long-lived streams (process output, directory watches) do not end on
		// their own, so a timed-out graceful shutdown is expected; cut them.
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("agent: serve: %w", err)
	}
	return nil
}

// accountKey is the context key under which the account a request acts as
// is stored.
type accountKey struct{}

// authenticate rejects every request except GET /health that lacks the access
// token (or, for /files, a valid signature), and records the account the
// request acts as in its context.
func (a *agent) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		if !a.tokenOK(r.Header.Get(agentapi.AccessTokenHeader)) {
			msg := "missing or invalid " + agentapi.AccessTokenHeader
			if r.URL.Path == "/files" && r.URL.Query().Has(filesig.ParamSignature) {
				err := a.signatureOK(r)
				if err == nil {
					a.serveAs(next, w, r)
					return
				}
				msg = err.Error()
			}
			if isRPCPath(r.URL.Path) && a.errw.IsSupported(r) {
				_ = a.errw.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
				return
			}
			writeJSONError(w, http.StatusUnauthorized, msg)
			return
		}
		a.serveAs(next, w, r)
	})
}

// serveAs passes an authenticated request on with its account.
func (a *agent) serveAs(next http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx := context.WithValue(r.Context(), accountKey{}, a.identity(userName(r)))
	next.ServeHTTP(w, r.WithContext(ctx))
}

// account returns the account the request in ctx acts as.
func (a *agent) account(ctx context.Context) account {
	if acc, ok := ctx.Value(accountKey{}).(account); ok {
		return acc
	}
	return a.identity("")
}

// tokenOK reports whether got is the configured token, in constant time so
// that response timing does not leak how much of a guess was right.
func (a *agent) tokenOK(got string) bool {
	want := a.token()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// isRPCPath reports whether path addresses one of the Connect services.
func isRPCPath(path string) bool {
	return strings.HasPrefix(path, "/"+processconnect.ProcessName+"/") ||
		strings.HasPrefix(path, "/"+filesystemconnect.FilesystemName+"/")
}

// userName extracts the user name E2B clients send as Basic auth with an
// empty password, or as the username query parameter on /files.
func userName(r *http.Request) string {
	if name, _, ok := r.BasicAuth(); ok && name != "" {
		return name
	}
	return r.URL.Query().Get("username")
}

// homeDir returns the directory that relative paths and commands without a
// cwd resolve against: the account's home if it exists, else /.
func (a *agent) homeDir(ctx context.Context) string {
	if h := a.account(ctx).Home; h != "" && isDir(h) {
		return h
	}
	return "/"
}

// resolvePath turns a client path into an absolute, clean one: "~" and "~/x"
// expand to the home directory, and relative paths are taken from it.
func (a *agent) resolvePath(ctx context.Context, p string) string {
	switch {
	case p == "" || p == "~":
		return a.homeDir(ctx)
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(a.homeDir(ctx), p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	default:
		return filepath.Join(a.homeDir(ctx), p)
	}
}

// isDir reports whether p exists and is a directory (following symlinks).
func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// keepaliveFor returns the keepalive interval for a stream, shortened when
// the client asked for a smaller one.
func (a *agent) keepaliveFor(h http.Header) time.Duration {
	interval := a.cfg.KeepaliveInterval
	var secs int
	if _, err := fmt.Sscanf(h.Get(agentapi.KeepaliveHeader), "%d", &secs); err == nil && secs > 0 {
		interval = min(interval, time.Duration(secs)*time.Second)
	}
	return interval
}

// writeJSONError answers a plain-HTTP request with the error body E2B clients
// parse: {"code": <status>, "message": "..."}.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}
