// Package mcp is Sandpit's Model Context Protocol server: the tools an
// agent needs to use sandboxes (create one, run commands and code in it,
// read and write its files, expose its ports, snapshot, fork and delete
// it) and resources for the sandbox list and files. It is built on the
// official Go SDK and serves over stdio (`sandpit mcp`) and Streamable HTTP
// (/mcp on the daemon's API listener).
//
// Every tool acts through the native API's Go client, so a token's owner
// scoping, scopes and idempotency apply exactly as on /v1: over stdio the
// client is the one `sandpit mcp` was configured with, over HTTP one made
// for each request's own bearer token. Each tool call that makes or
// removes something carries an Idempotency-Key derived from its JSON-RPC
// request id (IdempotencyKey), so a client re-sending a call makes nothing
// twice.
package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/client"
)

// maxMessageBytes bounds one JSON-RPC message on either transport: room
// for a file of maxFileBytes in base64 and its envelope.
const maxMessageBytes = 16 << 20

// Config configures a server.
type Config struct {
	// Version is the server's version, as initialize reports it.
	Version string
	// Client returns the API client a request acts through. header is the
	// HTTP request's header over Streamable HTTP, nil over stdio.
	Client func(header http.Header) (*client.Client, error)
	// Logger logs the SDK's own trouble; nil discards it.
	Logger *slog.Logger
	// Stdio says the server serves one client for its whole life (its
	// session is the process).
	Stdio bool
}

// server holds what the tool handlers share.
type server struct {
	cfg Config
	// stdioSession names the session of a stdio server, which has one
	// client for its whole life and no session id from the SDK. It is
	// random, because a restarted `sandpit mcp` is a new session whose
	// request ids start again (see IdempotencyKey).
	stdioSession string
}

// NewServer builds the MCP server with every tool and resource.
func NewServer(cfg Config) *sdk.Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg}
	if cfg.Stdio {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		s.stdioSession = "stdio-" + hex.EncodeToString(b)
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "sandpit", Title: "Sandpit sandboxes", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "Sandpit runs isolated Linux sandboxes. Create one with create_sandbox, then run commands (run_command), " +
			"read and write its files, expose a port to get a URL, and delete it when done. Every tool takes the sandbox's id.",
		Logger: cfg.Logger,
	})
	s.addTools(srv)
	s.addResources(srv)
	return srv
}

// session names the MCP session a request belongs to, for its keys; ""
// when it has none to name (a request over HTTP without a session, which a
// stateful handler does not serve), whose calls then get a fresh key each.
func (s *server) session(ss *sdk.ServerSession) string {
	if ss != nil {
		if id := ss.ID(); id != "" {
			return "http-" + id
		}
	}
	return s.stdioSession
}

// ServeStdio serves one client on in and out (a process's stdin and
// stdout) until it leaves or ctx ends, acting through c.
func ServeStdio(ctx context.Context, c *client.Client, version string, in io.ReadCloser, out io.WriteCloser, logger *slog.Logger) error {
	srv := NewServer(Config{Version: version, Logger: logger, Stdio: true, Client: func(http.Header) (*client.Client, error) { return c, nil }})
	err := srv.Run(ctx, taggingTransport{&sdk.IOTransport{Reader: in, Writer: out, MaxLineLength: maxMessageBytes}})
	if ctx.Err() != nil {
		// Told to stop (a signal): the ordinary end, not a failure.
		return nil
	}
	return err
}

// ErrUnauthorized is what a Verifier's error wraps for a token it refuses
// (any other error is the verifier's own failure, answered 500).
var ErrUnauthorized = errors.New("unauthorized")

// Verifier checks a bearer token and names the owner it acts for; an error
// refuses the request with 401.
type Verifier func(ctx context.Context, token string) (owner string, err error)

// HTTPConfig configures the Streamable HTTP handler.
type HTTPConfig struct {
	Version string
	Logger  *slog.Logger
	// API is the daemon's API handler, which serves the tools' calls in
	// process with each request's own bearer token (InProcessClient).
	API http.Handler
	// Verify authenticates each request before any MCP handling.
	Verify Verifier
	// SessionTimeout closes a session idle this long; 0 is 30 minutes.
	SessionTimeout time.Duration
}

// HTTPHandler serves MCP over Streamable HTTP.
type HTTPHandler struct {
	srv *sdk.Server
	h   http.Handler
}

// Handler serves MCP over Streamable HTTP. Each request must carry a
// bearer token Verify accepts, or it is answered 401 before any MCP
// handling; a session is bound to the owner of the token that opened it
// (the SDK refuses it to another owner's token), and each tool call acts
// with its own request's token.
func Handler(cfg HTTPConfig) *HTTPHandler {
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Minute
	}
	srv := NewServer(Config{Version: cfg.Version, Logger: cfg.Logger, Client: func(h http.Header) (*client.Client, error) {
		return InProcessClient(cfg.API, FromAuthorization(h)), nil
	}})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Logger:              cfg.Logger,
		SessionTimeout:      cfg.SessionTimeout,
		MaxRequestBodyBytes: maxMessageBytes,
		// The SDK's DNS-rebinding guard refuses loopback connections whose
		// Host is not loopback, which is every request a local reverse
		// proxy (Caddy, --tls auto's api host) forwards. It guards servers
		// that trust whoever can reach them; this one wants a bearer token
		// on every request, which a rebound page does not have.
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		owner, err := cfg.Verify(ctx, token)
		if err != nil {
			if errors.Is(err, ErrUnauthorized) {
				return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
			}
			return nil, err
		}
		return &auth.TokenInfo{UserID: owner}, nil
	}
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return &HTTPHandler{srv: srv, h: authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessageBytes))
			if err != nil {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			tagged := tagBody(body)
			r.Body = io.NopCloser(bytes.NewReader(tagged))
			r.ContentLength = int64(len(tagged))
		}
		h.ServeHTTP(w, r)
	}))}
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// Close ends every session, and with them the event streams their clients
// hold open, so that the HTTP server's shutdown need not wait for them.
func (h *HTTPHandler) Close() {
	for ss := range h.srv.Sessions() {
		_ = ss.Close()
	}
}
