// Package agentapi is the contract between the daemon and the in-sandbox
// agent: the port the agent listens on, the headers and environment
// variables it reads, its daemon-only init call, and the bounded Connect
// clients through which the daemon's side calls it. Both sides import this
// package, so neither needs the other: the agent (internal/agent) is the
// server of this contract, and the service and the surfaces are its clients.
//
// It may import only the generated protocol packages (proto/...) and
// connectrpc; nothing of the daemon and nothing of the agent.
package agentapi

import (
	"net/http"
	"path"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

// Port is the port the in-sandbox agent listens on; E2B clients expect 49983.
const Port = 49983

// Headers the agent reads.
const (
	// AccessTokenHeader carries the sandbox's access token on every request
	// to the agent but GET /health.
	AccessTokenHeader = "X-Access-Token"
	// KeepaliveHeader is how E2B clients ask for a keepalive interval, in
	// seconds. The agent honours it only when it is shorter than its own.
	KeepaliveHeader = "Keepalive-Ping-Interval"
)

// ExecErrorHeader is set on the error of a process start that failed
// because of the program itself, so that a client tells "no such program"
// from "found but not runnable" without parsing the message: the CLI exits
// 127 and 126 for them, as docker does.
const (
	ExecErrorHeader   = "Sandpit-Exec-Error"
	ExecNotFound      = "not-found"
	ExecNotExecutable = "not-executable"
)

// Plain-HTTP paths of the agent, next to its Connect services
// process.Process and filesystem.Filesystem.
const (
	// HealthPath answers 204 without authentication once the agent serves.
	HealthPath = "/health"
	// FilesPath downloads (GET) and uploads (POST, PUT) files.
	FilesPath = "/files"
	// InitPath is the agent's authenticated init call. A pooled container's
	// agent starts with a token only the daemon knows and no sandbox
	// settings; when a create adopts it, the daemon calls init (with that
	// token) to give it the sandbox's environment, working directory,
	// default user and access token before any of the sandbox's processes
	// runs. E2B's envd has a call of the same name and shape.
	InitPath = "/init"
)

// Environment variables the runtime starts the agent with.
const (
	// TokenEnv passes the sandbox's access token. The agent removes it
	// before starting any process.
	TokenEnv = "SANDPIT_AGENT_TOKEN"
	// UserEnv names the sandbox's default user: the account processes and
	// file operations act as when a request names none. The agent removes
	// it from the environment of the processes it starts.
	UserEnv = "SANDPIT_AGENT_USER"
)

// InitRequest is the body of POST InitPath. Fields left empty keep the
// agent's current setting.
type InitRequest struct {
	// EnvVars are laid over the agent's default environment.
	EnvVars map[string]string `json:"envVars,omitempty"`
	// AccessToken replaces the token every later request must present.
	AccessToken string `json:"accessToken,omitempty"`
	// DefaultUser replaces the account requests naming none act as.
	DefaultUser string `json:"defaultUser,omitempty"`
	// DefaultWorkdir is where processes without a cwd start.
	DefaultWorkdir string `json:"defaultWorkdir,omitempty"`
}

// ReadMaxBytes bounds every message the daemon reads from a sandbox's agent
// over Connect. The agent runs inside the sandbox, next to untrusted code,
// so its answers are untrusted input too: without the bound a compromised
// agent could make the daemon allocate without limit.
const ReadMaxBytes = 32 << 20

// StartLogPath is the file inside a sandbox that holds the output of its
// template's (or image's) start command, the process the sandbox exists to
// run; `sandpit logs` reads it.
const StartLogPath = "/tmp/.sandpit-start.log"

// Clients are the Connect clients of one agent address. They hold no
// token, so one set serves every request to that address.
type Clients struct {
	Process    processconnect.ProcessClient
	Filesystem filesystemconnect.FilesystemClient
}

// NewClients builds the Connect clients of the agent at addr (host:port)
// on hc; every message they read is bounded by ReadMaxBytes.
func NewClients(hc *http.Client, addr string) Clients {
	base := "http://" + addr
	opt := connect.WithReadMaxBytes(ReadMaxBytes)
	return Clients{
		Process:    processconnect.NewProcessClient(hc, base, opt),
		Filesystem: filesystemconnect.NewFilesystemClient(hc, base, opt),
	}
}

// Agent is the daemon's connection to one running sandbox's agent: its
// Connect clients (built once per agent address and shared by every request
// to it), the address and the access token every call must carry.
type Agent struct {
	Addr       string
	Token      string
	Process    processconnect.ProcessClient
	Filesystem filesystemconnect.FilesystemClient
}

// NewRequest wraps msg in a Connect request carrying the access token.
func NewRequest[T any](msg *T, token string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(AccessTokenHeader, token)
	return req
}

// DaemonOnlyPath reports whether a request for p on a sandbox's port is
// one only the daemon makes: the agent's init call, which replaces its
// access token and environment. Surfaces and the preview proxy refuse it.
func DaemonOnlyPath(port int, p string) bool {
	return port == Port && path.Clean("/"+p) == InitPath
}

// CAPath is where the daemon mounts, read-only, the certificate of its
// egress CA, which signs what its egress proxy presents for the hosts whose
// requests a sandbox's rules transform. The agent adds it to the image's
// trust store at start and points the usual variables at it.
const CAPath = "/.sandpit/ca.pem"
