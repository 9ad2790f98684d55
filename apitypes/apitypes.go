// Package apitypes is the wire contract of Sandpit's native API (/v1): the
// request and response bodies and the error codes. The daemon's handlers
// (internal/api/v1) and the Go SDK (client) both use these types, so the
// server and its SDK cannot drift apart.
package apitypes

import (
	"encoding/json"
	"time"
)

// Sandbox is the native representation of a sandbox.
type Sandbox struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Image string `json:"image"`
	// Template is the template the sandbox was created from, as the create
	// named it (a name, NAME:TAG or an id); empty when it named none.
	Template string `json:"template,omitempty"`
	State    string `json:"state"`
	// StateReason says why a sandbox stopped on its own: exited, oom or
	// killed.
	StateReason string            `json:"state_reason,omitempty"`
	Labels      map[string]string `json:"labels"`
	Env         map[string]string `json:"env"`
	CPU         float64           `json:"cpu,omitempty"`
	MemoryMB    int64             `json:"memory_mb,omitempty"`
	// DiskMB is the disk limit of what the sandbox writes outside its
	// volumes, in MiB; absent when the daemon limits none.
	DiskMB    int64      `json:"disk_mb,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	EndAt     *time.Time `json:"end_at,omitempty"`
	Network   *Network   `json:"network,omitempty"`
	// Node is the cluster node that runs the sandbox; empty on a daemon
	// without --cluster.
	Node string `json:"node,omitempty"`
	// PauseMode is what a paused sandbox keeps: "memory" or "filesystem".
	PauseMode string `json:"pause_mode,omitempty"`
	// Lifecycle is what the deadline does and whether traffic wakes a
	// paused sandbox.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Volumes are the volumes mounted into the sandbox.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// Lifecycle is a sandbox's deadline action: on_timeout "kill" (the
// default) or "pause" (keeping memory when keep_memory, else the
// filesystem), and auto_resume, which wakes a paused sandbox on the first
// request through the E2B gateway or its preview URL.
type Lifecycle struct {
	OnTimeout  string `json:"on_timeout,omitempty"`
	KeepMemory bool   `json:"keep_memory,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
}

// PauseRequest is the body of POST /v1/sandboxes/{id}/pause.
type PauseRequest struct {
	// Mode is "memory" (the default) or "filesystem".
	Mode string `json:"mode,omitempty"`
}

// Resources is the body of PUT /v1/sandboxes/{id}/resources: the new cpu
// and memory limits, a field left out keeping what the sandbox has.
type Resources struct {
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Image string `json:"image,omitempty"`
	// Template names a template of the caller's (by name, name:tag or id)
	// or one of the daemon's; image wins over it.
	Template string            `json:"template,omitempty"`
	Name     string            `json:"name,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	CPU      float64           `json:"cpu,omitempty"`
	MemoryMB int64             `json:"memory_mb,omitempty"`
	// DiskMB limits what the sandbox writes outside its volumes (its root,
	// /tmp included), in MiB: at most the daemon's --disk-mb, which is the
	// default.
	DiskMB   int64    `json:"disk_mb,omitempty"`
	TimeoutS int64    `json:"timeout_s,omitempty"`
	Network  *Network `json:"network,omitempty"`
	// Lifecycle sets what the deadline does; nil kills.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Volumes are mounted into the sandbox, each one of the caller's
	// volumes by name or id.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// ListResponse is the body of GET /v1/sandboxes.
type ListResponse struct {
	Sandboxes     []Sandbox `json:"sandboxes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Cmd      string            `json:"cmd"`
	Args     []string          `json:"args,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
}

// CodeRequest runs code on a sandbox's code interpreter (POST
// /v1/sandboxes/{id}/code). The answer streams one CodeEvent per line
// (application/x-ndjson) until the execution ends.
type CodeRequest struct {
	Code     string `json:"code"`
	Language string `json:"language,omitempty"` // python when empty
	// Context names a context of the caller's choosing; code run in one
	// context shares its variables. It is made on first use. Empty is the
	// language's default context.
	Context  string            `json:"context,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
}

// CodeEvent is one line of an execution's stream, in the code
// interpreter's own shape: type stdout and stderr carry text; result
// carries the MIME forms of a value or a display call (text, html, png and
// svg in base64, json, markdown, latex, chart); error carries name, value and
// traceback; number_of_executions carries execution_count. Fields of other
// types are kept in Extra by the Go client.
type CodeEvent struct {
	Type           string          `json:"type"`
	Text           string          `json:"text,omitempty"`
	Name           string          `json:"name,omitempty"`
	Value          string          `json:"value,omitempty"`
	Traceback      json.RawMessage `json:"traceback,omitempty"`
	IsMainResult   bool            `json:"is_main_result,omitempty"`
	HTML           string          `json:"html,omitempty"`
	Markdown       string          `json:"markdown,omitempty"`
	PNG            string          `json:"png,omitempty"`
	JPEG           string          `json:"jpeg,omitempty"`
	SVG            string          `json:"svg,omitempty"`
	LaTeX          string          `json:"latex,omitempty"`
	JSON           json.RawMessage `json:"json,omitempty"`
	Chart          json.RawMessage `json:"chart,omitempty"`
	ExecutionCount int             `json:"execution_count,omitempty"`
}

// Stats is one sample of a running sandbox's resource use. A limit of 0
// means the engine set none (the host's is then the bound).
type Stats struct {
	CPUCount         int       `json:"cpu_count"`
	CPUUsedPercent   float64   `json:"cpu_used_percent"`
	MemoryUsedBytes  int64     `json:"memory_used_bytes"`
	MemoryLimitBytes int64     `json:"memory_limit_bytes"`
	DiskUsedBytes    int64     `json:"disk_used_bytes"`
	DiskLimitBytes   int64     `json:"disk_limit_bytes"`
	Time             time.Time `json:"time"`
}

// CodeContext is a named context of a sandbox's code interpreter.
type CodeContext struct {
	Name     string `json:"name"`
	Language string `json:"language"`
}

// ExecResult is the answer of a finished command.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Truncated: a stream went over the daemon's 16 MiB cap and holds only
	// its first 16 MiB.
	Truncated bool `json:"truncated,omitempty"`
}

// ExposeRequest is the body of POST /v1/sandboxes/{id}/ports.
type ExposeRequest struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}

// Port is an exposure of a sandbox port.
type Port struct {
	// SandboxID is set only in the debug view, which lists every exposure.
	SandboxID string    `json:"sandbox_id,omitempty"`
	Port      int       `json:"port"`
	Protocol  string    `json:"protocol"`
	HostPort  int       `json:"host_port"`
	PublicURL string    `json:"public_url"`
	Reused    bool      `json:"reused"`
	CreatedAt time.Time `json:"created_at"`
}

// PortList is the body of GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// DomainRequest is the body of POST /v1/sandboxes/{id}/custom-domains.
type DomainRequest struct {
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
}

// Domain is a custom hostname bound to a sandbox port.
type Domain struct {
	Hostname  string    `json:"hostname"`
	SandboxID string    `json:"sandbox_id"`
	Port      int       `json:"port"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
}

// DomainList is the body of GET /v1/sandboxes/{id}/custom-domains.
type DomainList struct {
	Domains []Domain `json:"custom_domains"`
}

// Event is one sandbox state change, as GET /v1/events streams it (one
// Server-Sent Event per change, the event name being Type).
type Event struct {
	Type      string    `json:"type"` // created, started, stopped, paused, resumed, expired, deleted, died
	SandboxID string    `json:"sandbox_id"`
	State     string    `json:"state"`     // the sandbox's state after the change; "" once it is gone
	OldState  string    `json:"old_state"` // its state before
	Time      time.Time `json:"time"`
	// Node is the cluster node that runs the sandbox; "" on a single daemon.
	Node string `json:"node,omitempty"`
	// A template build's change (types template.building, template.ready,
	// template.error) names no sandbox: it names the template and the
	// build, State is the build's state and Error a failed build's reason.
	TemplateID string `json:"template_id,omitempty"`
	Template   string `json:"template,omitempty"` // the template's name
	BuildID    string `json:"build_id,omitempty"`
	Error      string `json:"error,omitempty"`
	// Network is set on a network.denied event: what the egress proxy
	// refused the sandbox (its state did not change).
	Network *Denial `json:"network,omitempty"`
}

// Denial is one connection or DNS answer the egress proxy refused a
// sandbox.
type Denial struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`           // tcp or dns
	Name   string    `json:"name,omitempty"` // the name asked for or presented (SNI, Host)
	Addr   string    `json:"addr,omitempty"` // the destination address (tcp)
	Port   int       `json:"port,omitempty"`
	Reason string    `json:"reason"` // "not in allow list", "in deny list", ...
	// Message is the line to show a user: "blocked pypi.org:443 (not in allow list)".
	Message string `json:"message"`
}

// NetworkDenied is GET /v1/sandboxes/{id}/network/denied.
type NetworkDenied struct {
	// Denied are the most recent refusals, oldest first (at most 100).
	Denied []Denial `json:"denied"`
	// Total counts every refusal since the daemon started.
	Total uint64 `json:"total"`
	// Learned are the names the sandbox used in learn mode, sorted.
	Learned []string `json:"learned"`
}

// ErrorBody is the shape of every non-2xx answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine code and a human message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of the native API.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	CodeNotFound     = "not_found"
	CodeNameConflict = "name_conflict"
	// CodeInUse: the resource is used by a sandbox (a snapshot it runs
	// from, a volume it mounts) and cannot be deleted.
	CodeInUse             = "in_use"
	CodeHostnameConflict  = "hostname_conflict"
	CodeProtocolConflict  = "port_protocol_conflict"
	CodeConflict          = "conflict"
	CodePortPoolExhausted = "port_pool_exhausted"
	CodeNotRunning        = "not_running"
	// CodeSandboxPaused and CodeSandboxStopped: the call needs a running
	// sandbox and this one is paused (resume it) or stopped (start it).
	// Other states that are not running answer CodeNotRunning.
	CodeSandboxPaused      = "sandbox_paused"
	CodeSandboxStopped     = "sandbox_stopped"
	CodeUnknownImage       = "unknown_image"
	CodeUnknownTemplate    = "unknown_template"
	CodeBodyTooLarge       = "body_too_large"
	CodeUpstream           = "upstream_failed"
	CodeInternal           = "internal"
	CodeTimeout            = "timeout"
	CodeKeyMismatch        = "idempotency_key_mismatch"
	CodeKeyInFlight        = "idempotency_key_in_flight"
	CodeInvalidKey         = "invalid_idempotency_key"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeUnsupportedMedia   = "unsupported_media_type"
	CodeServiceUnavailable = "unavailable"
	CodeForbidden          = "forbidden"
	CodeQuotaExceeded      = "quota_exceeded"
	CodePortForbidden      = "port_forbidden"
	// CodeNoInterpreter: the sandbox has no code interpreter (it was not
	// made from an interpreter template).
	CodeNoInterpreter     = "no_interpreter"
	CodeTokenNameConflict = "token_name_conflict"
	// CodeBuildConflict: another build of the template, with another
	// definition, is running.
	CodeBuildConflict = "build_conflict"
	// CodeVolumeInUse: the volume is mounted by a sandbox; delete the
	// sandbox first.
	CodeVolumeInUse = "volume_in_use"
	// CodeNoLeader (503, with Retry-After): a cluster write found no Raft
	// leader; retry with the same key.
	CodeNoLeader = "no_leader"
	// CodeNoCapacity (503, with Retry-After): no cluster node may take
	// another sandbox (each is drained or at its --max-sandboxes).
	CodeNoCapacity = "no_capacity"
	// CodeOwnerUnreachable (503, with Retry-After): the cluster node that owns
	// the sandbox, or that a keyed create must reach, did not answer.
	CodeOwnerUnreachable = "owner_unreachable"
	// CodeMisdirected (421): a forwarded request reached a node that does not
	// own its sandbox; nodes forward only once.
	CodeMisdirected = "misdirected"
	// CodeSandboxLost (410): the sandbox's cluster node died and the
	// sandbox was not re-created; delete it to free its name.
	CodeSandboxLost = "sandbox_lost"
	// CodeRateLimited (429, with Retry-After): the client's address made
	// too many requests without a credential, or with refused ones.
	CodeRateLimited = "rate_limited"
)

// Network is a sandbox's own egress policy. Egress "public" (the default)
// leaves the daemon's policy (public addresses only); "none" refuses every
// destination not in Allow. Allow and Deny hold IPv4 CIDRs or addresses;
// an address in both is allowed.
//
// AllowDomains and DenyDomains judge connections to ports 80 and 443 by the
// name they present (TLS SNI or HTTP Host) and the sandbox's DNS answers;
// "*.example.com" matches every name below example.com. With egress "none"
// an allow list of domains means "these names and nothing else". Mode
// "learn" refuses nothing by name and records the names used (see GET
// /v1/sandboxes/{id}/network/denied). Profiles name domain lists the
// operator defined (--egress-profile); they are added to AllowDomains.
type Network struct {
	Egress       string   `json:"egress,omitempty"`
	Allow        []string `json:"allow,omitempty"`
	Deny         []string `json:"deny,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
	Mode         string   `json:"mode,omitempty"`
	Profiles     []string `json:"profiles,omitempty"`
	// Rules transform the requests to a host on their way out: the key
	// is a host name or "*.example.com", each rule's transform sets
	// headers whose values may hold {{secret:NAME}} placeholders, which the
	// daemon's egress proxy fills with the owner's secret for that host
	// alone (see docs/secrets.md). A rule grants no access by itself.
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one rule of a host in Network.Rules.
type NetworkRule struct {
	Transform *NetworkTransform `json:"transform,omitempty"`
}

// NetworkTransform is what a rule changes in a request.
type NetworkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}
