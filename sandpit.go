// Package sandpit holds Sandpit's domain types: sandboxes and their states,
// exposed ports, custom domains and idempotency claims, with the sentinel
// errors every layer shares. The store persists them, the service orchestrates
// them and the APIs present them; none of those owns them, so a second store
// (the cluster's replicated index) can speak the same types.
package sandpit

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. Callers test them with errors.Is; the API layer maps them to
// HTTP statuses in one place.
var (
	ErrNotFound          = errors.New("not found")
	ErrNameConflict      = errors.New("name already in use")
	ErrHostnameConflict  = errors.New("hostname already bound to another sandbox")
	ErrPortPoolExhausted = errors.New("host port pool exhausted")
	ErrTapPoolExhausted  = errors.New("tap pool exhausted")
	ErrClaimLost         = errors.New("idempotency claim no longer held")
	// ErrNoLeader: a cluster write found no Raft leader (an election is under
	// way); the request may be retried shortly.
	ErrNoLeader = errors.New("no cluster leader")
	// ErrNoCapacity: no cluster node may take another sandbox (each is at
	// its --max-sandboxes, or drained); the request may be retried later.
	ErrNoCapacity = errors.New("no cluster node has room for another sandbox")
	// ErrSandboxExists is returned when a sandbox id is taken. It is distinct
	// from ErrNameConflict: a duplicate id is a caller bug or a retry of a
	// create that already happened, not a user-visible name clash.
	ErrSandboxExists = errors.New("sandbox id already exists")
	// ErrInvalidPageToken is returned for a page token the listing did not
	// issue.
	ErrInvalidPageToken = errors.New("invalid page token")
	// ErrSandboxLost: the cluster node that ran the sandbox died and the
	// cluster's failover policy left it lost; only a delete (which frees its
	// name and hostnames) is accepted.
	ErrSandboxLost = errors.New("sandbox lost with its cluster node")
)

// PortAccess says who may reach a sandbox's ports, other than its agent's,
// through the E2B gateway and the preview proxy.
type PortAccess string

// Port access policies.
const (
	// PortAccessExposed: only ports exposed through the API (the default,
	// and what native and Daytona creates get).
	PortAccessExposed PortAccess = "exposed"
	// PortAccessPublic: every port, as E2B serves its sandboxes by default.
	PortAccessPublic PortAccess = "public"
	// PortAccessToken: every port, to requests carrying the sandbox's traffic
	// token (E2B's network.allowPublicTraffic false).
	PortAccessToken PortAccess = "token"
)

// State is a sandbox's lifecycle state as the store records it.
type State string

// Sandbox states.
const (
	// StateCreating marks a row inserted before any side effect: the row claims
	// the id and the name first, so a losing duplicate never touches the engine.
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopped  State = "stopped"
	StatePaused   State = "paused"
	StateError    State = "error"
	// StateDeleting records a delete's intent before its first side effect,
	// so a delete interrupted by a crash is finished rather than forgotten.
	StateDeleting State = "deleting"
	// StateStarting is never stored: the API shows it for a running row
	// whose container the daemon is still bringing back after a restart.
	StateStarting State = "starting"
)

// Reasons a sandbox left the running state without being asked to.
const (
	ReasonExited  = "exited"  // its main process ended on its own
	ReasonOOM     = "oom"     // the kernel killed it for memory
	ReasonKilled  = "killed"  // a signal from outside the daemon ended it
	ReasonRemoved = "removed" // its container was removed behind the daemon's back
	// ReasonDiskLimit: the disk watcher stopped it for writing more than
	// its disk limit where the engine cannot enforce one.
	ReasonDiskLimit = "disk limit exceeded"
	// ReasonVolumeSize: the disk watcher stopped it because a volume it
	// mounts writable holds more than the volume's size.
	ReasonVolumeSize = "volume size exceeded"
	// ReasonMemoryLost: a memory pause whose frozen processes did not
	// outlive the engine (a dockerd or host restart); the sandbox is kept
	// as a filesystem pause and boots anew on resume.
	ReasonMemoryLost = "memory lost: the engine restarted"
)

// PauseMode says what a paused sandbox keeps.
type PauseMode string

// Pause modes.
const (
	// PauseNone is the mode of a sandbox that is not paused.
	PauseNone PauseMode = ""
	// PauseMemory freezes the sandbox's processes (the cgroup freezer):
	// resume continues them where they were. The memory lives as long as
	// the engine keeps the frozen container.
	PauseMemory PauseMode = "memory"
	// PauseFilesystem stops the sandbox's container and keeps its
	// filesystem: resume boots it anew, with its files.
	PauseFilesystem PauseMode = "filesystem"
)

// OnTimeout is what the sweeper does to a sandbox at its deadline.
type OnTimeout string

// Deadline actions.
const (
	// OnTimeoutKill deletes the sandbox (the default).
	OnTimeoutKill OnTimeout = "kill"
	// OnTimeoutPause pauses it, in the mode its KeepMemory says.
	OnTimeoutPause OnTimeout = "pause"
)

// Sandbox is one row of the sandboxes table.
type Sandbox struct {
	ID       string
	Name     string // "" means unnamed; non-empty names are unique per daemon
	Owner    string // owner of the token that made it
	Image    string
	Template string // facade template / snapshot name, informational
	State    State
	// StateReason says why the sandbox is in State when the daemon did not
	// put it there on request (a container that died on its own); "" else.
	StateReason string
	Labels      map[string]string // E2B metadata and Daytona labels live here
	Env         map[string]string
	CPU         float64 // cores; 0 = engine default
	MemoryMB    int64   // 0 = engine default
	ContainerID string
	AccessToken string // the agent's per-sandbox token
	// PortAccess and TrafficToken decide who reaches ports other than the
	// agent's; empty PortAccess reads as PortAccessExposed.
	PortAccess   PortAccess
	TrafficToken string
	EndAt        time.Time // zero = no deadline
	Network      NetworkPolicy
	CreatedAt    time.Time
	UpdatedAt    time.Time

	// DiskMB is the sandbox's disk limit in MiB, enforced on what it writes
	// outside its volumes (the engine's quota, else the disk watcher); 0
	// reads as the daemon's --disk-mb (rows from before per-sandbox limits,
	// or a daemon that limits none).
	DiskMB int64
	// Lifecycle intervals in the daemon's interval unit (minutes outside
	// tests): AutoStop stops a running sandbox idle that long (0 = never);
	// AutoArchive reports a sandbox stopped that long as archived (0 =
	// never); AutoDelete deletes a sandbox stopped that long (AutoDeleteNever
	// = never, 0 = as soon as it stops).
	AutoStop    int
	AutoArchive int
	AutoDelete  int
	// LastActivityAt is the last toolbox call, preview request or explicit
	// refresh; zero = none since the sandbox was created.
	LastActivityAt time.Time
	// StoppedAt is when the sandbox last stopped; zero while it runs.
	StoppedAt time.Time

	// PauseMode is what a paused sandbox keeps; PauseNone unless paused.
	PauseMode PauseMode
	// OnTimeout is what happens at EndAt; "" reads as OnTimeoutKill.
	// KeepMemory picks the mode of that pause (memory or filesystem).
	OnTimeout  OnTimeout
	KeepMemory bool
	// AutoResume wakes a paused sandbox on the first request through the
	// E2B gateway or its preview URL.
	AutoResume bool
	// Timeout is the create's timeout (whole seconds), which a sandbox
	// paused at its deadline gets again when it resumes; 0 = none.
	Timeout time.Duration
	// ArchiveImage is the image an archived sandbox's filesystem was
	// committed to (Daytona's archive); "" when not archived.
	ArchiveImage string
	// Volumes are the volumes mounted into the sandbox. A create writes
	// them with the row; reads of the row leave them empty (the service
	// fills them where a surface shows them).
	Volumes []VolumeMount
}

// TimeoutAction is the sandbox's deadline action, with the default filled in.
func (sb Sandbox) TimeoutAction() OnTimeout {
	if sb.OnTimeout == "" {
		return OnTimeoutKill
	}
	return sb.OnTimeout
}

// TimeoutPauseMode is the mode a pause at the deadline takes.
func (sb Sandbox) TimeoutPauseMode() PauseMode {
	if sb.KeepMemory {
		return PauseMemory
	}
	return PauseFilesystem
}

// AutoDeleteNever is the AutoDelete of a sandbox that is never deleted
// automatically.
const AutoDeleteNever = -1

// Interval names one lifecycle interval of a sandbox.
type Interval string

// Lifecycle intervals.
const (
	IntervalAutoStop    Interval = "autostop"
	IntervalAutoArchive Interval = "autoarchive"
	IntervalAutoDelete  Interval = "autodelete"
)

// IdleSince is when the sandbox was last active: its last activity, or its
// creation if there was none.
func (sb Sandbox) IdleSince() time.Time {
	if sb.LastActivityAt.After(sb.CreatedAt) {
		return sb.LastActivityAt
	}
	return sb.CreatedAt
}

// Egress values of a NetworkPolicy.
const (
	EgressPublic = "public"
	EgressNone   = "none"
)

// NetworkPolicy is a sandbox's own outbound policy: "none" refuses every
// destination not allowed; Allow CIDRs are reachable even when private or
// denied (allow wins, as on E2B); Deny CIDRs are refused. The zero value
// follows the daemon's defaults.
//
// AllowDomains and DenyDomains judge the connections to ports 80 and 443 by
// the name they present (TLS SNI, HTTP Host) and the DNS answers the
// sandbox gets; "*.example.com" matches every name below example.com. A
// domain allow list with egress "none" is "these names and nothing else".
// Mode "learn" refuses nothing by name and records the names used.
type NetworkPolicy struct {
	Egress       string   `json:"egress,omitempty"` // "", "public" or "none"
	Allow        []string `json:"allow,omitempty"`
	Deny         []string `json:"deny,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	DenyDomains  []string `json:"deny_domains,omitempty"`
	Mode         string   `json:"mode,omitempty"` // "" or "learn"
	// Profiles name operator-defined domain lists; the service adds their
	// domains to AllowDomains when it admits the policy, so a stored
	// policy never holds them.
	Profiles []string `json:"profiles,omitempty"`
	// MaskRequestHost (E2B's network.maskRequestHost) is the Host header
	// requests to the sandbox's servers arrive with, "${PORT}" standing
	// for the port; empty keeps the host the client asked for. It is about
	// traffic in, not out, and changes no egress rule.
	MaskRequestHost string `json:"mask_request_host,omitempty"`
	// Rules are per-host transforms the egress proxy applies to the
	// sandbox's HTTP and HTTPS requests (E2B's network.rules): the key is
	// a host name or "*.example.com", the value the rules in order. A
	// rule grants no access of its own: the allow and deny lists decide
	// whether the host is reached at all.
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one rule of a host.
type NetworkRule struct {
	Transform *NetworkTransform `json:"transform,omitempty"`
}

// NetworkTransform is what a rule changes in a request on its way out.
// Header values may hold placeholders ({{secret:NAME}}, or E2B's
// ${e2b.secrets.NAME}) that the egress proxy fills with the owner's
// secret, so that the value never enters the sandbox.
type NetworkTransform struct {
	// Headers are set on the request, replacing any the sandbox sent
	// under the same name.
	Headers map[string]string `json:"headers,omitempty"`
}

// NetworkModeLearn allows every name and records those a sandbox used.
const NetworkModeLearn = "learn"

// IsZero reports a policy that adds nothing to the daemon's defaults.
func (p NetworkPolicy) IsZero() bool {
	return (p.Egress == "" || p.Egress == EgressPublic) && len(p.Allow) == 0 && len(p.Deny) == 0 && !p.ByName()
}

// ByName reports a policy with rules on names, which the daemon's egress
// proxy and DNS server enforce.
func (p NetworkPolicy) ByName() bool {
	return len(p.AllowDomains) > 0 || len(p.DenyDomains) > 0 || len(p.Profiles) > 0 || p.Mode == NetworkModeLearn || len(p.Rules) > 0
}

// ListOptions filters and pages a sandbox listing. Paging is stable: rows are
// ordered by (created_at, id) and the page token encodes the last row seen.
type ListOptions struct {
	Labels    map[string]string // every pair must match
	Owner     string            // "" = every owner
	States    []State           // empty = any
	Limit     int               // <= 0 means 100
	PageToken string
	// Descending lists newest first: by (created_at, id) from the top.
	Descending bool
}

// ExposedPort is one row of exposed_ports.
type ExposedPort struct {
	SandboxID string
	Port      int
	Protocol  string // "http" or "tcp"
	HostPort  int    // 0 for http (no host port)
	PublicURL string
	CreatedAt time.Time
}

// ReserveOutcome is the three-state result of TryReserveHostPort.
type ReserveOutcome int

const (
	// Reserved: this call inserted the row.
	Reserved ReserveOutcome = iota + 1
	// Existing: (sandbox_id, port) was already exposed; Row is that exposure.
	Existing
	// Taken: another exposure owns the candidate host port; walk on.
	Taken
)

func (o ReserveOutcome) String() string {
	switch o {
	case Reserved:
		return "reserved"
	case Existing:
		return "existing"
	case Taken:
		return "taken"
	}
	return "unknown"
}

// ReserveResult carries the outcome and, for Reserved and Existing, the row.
type ReserveResult struct {
	Outcome ReserveOutcome
	Row     ExposedPort
}

// PortRange is an inclusive host-port pool.
type PortRange struct{ Lo, Hi int }

// Size is the number of ports in the range.
func (r PortRange) Size() int { return r.Hi - r.Lo + 1 }

// ClaimOutcome is the result of ClaimIdempotentRequest.
type ClaimOutcome int

const (
	// Acquired: this caller owns the work (a new row, or a stale row reset).
	Acquired ClaimOutcome = iota + 1
	// Replay: a completed attempt is within its replay window; reuse its outcome.
	Replay
	// InFlight: another attempt holds an unexpired pending lock.
	InFlight
	// Mismatch: the row exists but was made by a request with another hash.
	Mismatch
)

func (o ClaimOutcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Replay:
		return "replay"
	case InFlight:
		return "in_flight"
	case Mismatch:
		return "mismatch"
	}
	return "unknown"
}

// ClaimRequest names the request being claimed.
type ClaimRequest struct {
	Scope       string
	Fingerprint string
	// RequestHash, when non-empty, must equal the stored hash or the claim is a
	// Mismatch (an Idempotency-Key reused for a different request).
	RequestHash string
	PendingTTL  time.Duration
}

// Claim is the state of a request_idempotency row as seen by a claimer.
type Claim struct {
	Outcome     ClaimOutcome
	Scope       string
	Fingerprint string
	// Generation starts at 1. A reset of a stale *pending* row keeps it (the
	// retry of a crashed attempt is the same attempt); a reset of a *ready* row
	// whose replay window expired increments it (a genuinely new request).
	Generation  int64
	TargetID    string // recorded by SetIdempotentTarget or Complete
	State       string // "pending" or "ready"
	RequestHash string
	// The stored response, for Replay of keyed requests.
	ResponseStatus int
	ResponseBody   []byte
	LockedUntil    time.Time
	ReplayUntil    time.Time
}

// Completion is what CompleteIdempotentRequest records.
type Completion struct {
	Scope          string
	Fingerprint    string
	Generation     int64
	TargetID       string
	ResponseStatus int
	ResponseBody   []byte
	ReplayTTL      time.Duration
}

// TapSlot is one row of firecracker_tap_pool.
type TapSlot struct {
	Slot      int
	TapName   string
	VsockCID  int64
	SandboxID string // "" when free
}

// CustomDomain is one row of sandbox_custom_domains.
type CustomDomain struct {
	Hostname  string
	SandboxID string
	Port      int
	CreatedAt time.Time
}

// AddOutcome tells an AddCustomDomain caller whether it inserted the row.
type AddOutcome int

const (
	Added AddOutcome = iota + 1
	AlreadyBound
)

// ErrQuotaExceeded is returned when an operation would take an owner past one
// of its limits; the error names the limit.
var ErrQuotaExceeded = errors.New("quota exceeded")

// Errors every domain package shares; the API maps them to HTTP statuses in
// one place (internal/api).
var (
	// ErrInvalid: the request is malformed or asks for something that
	// cannot be; nothing was changed.
	ErrInvalid = errors.New("invalid request")
	// ErrUnknownImage and ErrUnknownTemplate: the image or template a
	// request names does not exist (or is another owner's).
	ErrUnknownImage    = errors.New("unknown image")
	ErrUnknownTemplate = errors.New("unknown template")
	// ErrImageBuilding: the template's image is being built and the
	// request ended before the build did.
	ErrImageBuilding = errors.New("the template's image is still being built")
	// ErrUnauthorized is a request whose credential is missing, unknown,
	// revoked or expired; ErrForbidden is a valid credential without the
	// scope an operation needs.
	ErrUnauthorized = errors.New("missing or invalid token")
	ErrForbidden    = errors.New("token lacks the scope for this operation")
)

// Scopes a personal access token may carry. Write implies read; admin implies
// everything and sees every owner's resources.
const (
	ScopeAdmin          = "admin"
	ScopeSandboxesWrite = "sandboxes:write"
	ScopeSandboxesRead  = "sandboxes:read"
)

// AdminOwner owns what the daemon's own token (<data-dir>/token or
// SANDPIT_TOKEN) makes, and every row that predates owners.
const AdminOwner = "admin"

// Principal is who a request acts as: the token's name, its owner and its
// scopes. The API's authentication puts it in the request's context and the
// service reads it there, so ownership travels with the request instead of
// through every signature.
type Principal struct {
	TokenName string
	Owner     string
	Scopes    []string
	// Admin principals see and act on every owner's resources.
	Admin bool
	// TokenPrefix is the public prefix of the personal access token the
	// request presented ("" for the daemon's own token), and ExpiresAt when
	// that token expires (zero: never). Long-lived sessions opened with the
	// token (event streams, sockets, terminals) are registered under the
	// prefix and end when the token is revoked or expires.
	TokenPrefix string    `json:",omitempty"`
	ExpiresAt   time.Time `json:",omitzero"`
}

// Action is what a route does to a sandbox, and so what a token needs in
// order to call it. Routes declare their action next to their pattern on
// every surface; the HTTP method says nothing about it (a WebSocket opened
// with GET can start a shell, and a GET of a preview URL exposes a port).
type Action string

const (
	// ActionRead reads metadata: get, list, events, ports and domains.
	ActionRead Action = "read"
	// ActionReadFiles reads what is inside a sandbox: files, listings,
	// searches, git status, command output.
	ActionReadFiles Action = "read-files"
	// ActionWriteFiles changes files inside a sandbox without running a
	// program of the caller's choosing.
	ActionWriteFiles Action = "write-files"
	// ActionExecute runs code: commands, sessions, PTYs, the interpreter,
	// language servers, git operations, and anything that hands out a
	// credential that can (the E2B envd access token).
	ActionExecute Action = "execute"
	// ActionExpose makes a port reachable from outside: exposures, custom
	// domains, preview URLs, signed preview URLs.
	ActionExpose Action = "expose"
	// ActionManage changes a sandbox's life: create, delete, start, stop,
	// pause, labels, timeouts.
	ActionManage Action = "manage"
	// ActionAdmin is the daemon's administration: tokens, limits, audit,
	// debug state, the cluster's membership.
	ActionAdmin Action = "admin"
)

// Actions lists every action, for documentation and table tests.
func Actions() []Action {
	return []Action{ActionRead, ActionReadFiles, ActionWriteFiles, ActionExecute, ActionExpose, ActionManage, ActionAdmin}
}

// ScopeGrants reports whether a token scope allows action: sandboxes:read
// allows reading metadata and files, sandboxes:write everything on the
// owner's sandboxes, admin everything.
func ScopeGrants(scope string, a Action) bool {
	switch scope {
	case ScopeAdmin:
		return true
	case ScopeSandboxesWrite:
		return a != ActionAdmin
	case ScopeSandboxesRead:
		return a == ActionRead || a == ActionReadFiles
	}
	return false
}

// May reports whether the principal may perform action a.
func (p Principal) May(a Action) bool {
	if p.Admin {
		return true
	}
	for _, s := range p.Scopes {
		if ScopeGrants(s, a) {
			return true
		}
	}
	return false
}

// Redacted stands in for a secret value (an env value, a token) shown to a
// principal that may read a sandbox but not execute in it: the key stays,
// so the caller can see what is set, but not what it is set to.
const Redacted = "[redacted]"

// RedactEnv returns env with every value replaced by Redacted, or env itself
// when the principal of ctx may execute (and so could read the values from
// inside the sandbox anyway).
func RedactEnv(ctx context.Context, env map[string]string) map[string]string {
	if p, ok := PrincipalFrom(ctx); !ok || p.May(ActionExecute) || len(env) == 0 {
		return env
	}
	out := make(map[string]string, len(env))
	for k := range env {
		out[k] = Redacted
	}
	return out
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal of ctx. A context without one is the
// daemon acting on its own behalf (sweeper, reconcile, start-up), which sees
// everything; every API request carries a principal set by authentication.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Token is one personal access token as stored: never the secret, only its
// SHA-256 hash and the short public prefix it is looked up by.
type Token struct {
	Prefix     string
	Name       string
	Owner      string
	Scopes     []string
	SecretHash []byte
	CreatedAt  time.Time
	LastUsedAt time.Time // zero = never used
	ExpiresAt  time.Time // zero = never expires
	RevokedAt  time.Time // zero = live
}

// OwnerLimits are an owner's quotas; zero means unlimited.
type OwnerLimits struct {
	Owner        string
	MaxSandboxes int64
	MaxCPU       float64 // total cores over the owner's sandboxes
	MaxMemoryMB  int64   // total MiB over the owner's sandboxes
	MaxPorts     int64   // exposed ports over the owner's sandboxes
	MaxDomains   int64   // custom hostnames over the owner's sandboxes
	// Per-sandbox defaults (a create naming no cpu or memory gets them) and
	// caps (a create asking for more is refused); 0 leaves the daemon's.
	DefaultCPU         float64
	DefaultMemoryMB    int64
	MaxSandboxCPU      float64
	MaxSandboxMemoryMB int64
	// AllowPrivateCIDRs are the private and reserved ranges the operator
	// lets this owner's sandboxes open with an allow list; without them an
	// allow that covers such a range is refused.
	AllowPrivateCIDRs []string
	UpdatedAt         time.Time
}

// Unlimited reports whether no limit is set.
func (l OwnerLimits) Unlimited() bool {
	return l.MaxSandboxes == 0 && l.MaxCPU == 0 && l.MaxMemoryMB == 0 && l.MaxPorts == 0 && l.MaxDomains == 0 &&
		l.DefaultCPU == 0 && l.DefaultMemoryMB == 0 && l.MaxSandboxCPU == 0 && l.MaxSandboxMemoryMB == 0 &&
		len(l.AllowPrivateCIDRs) == 0
}

// AuditEntry is one row of the append-only audit log. It never holds a
// secret: the actor is a token's name, never the token.
type AuditEntry struct {
	Seq       int64
	At        time.Time
	TokenName string
	Owner     string
	Action    string // "sandbox.create", "token.revoke", ...
	Resource  string // sandbox id, token name, owner, ...
	Outcome   string // "ok" or the error code
	Detail    string
}

// AuditQuery filters a listing of the audit log.
type AuditQuery struct {
	Owner    string // "" = all
	AfterSeq int64  // entries with a larger seq only
	Limit    int    // <= 0 means 100, at most 1000
}

// secretPlaceholder matches a placeholder in a network rule's header value:
// Sandpit's {{secret:NAME}} and E2B's ${e2b.secrets.NAME}. A name follows
// the secrets store's grammar, so it holds neither braces nor dots.
var secretPlaceholder = regexp.MustCompile(`\{\{secret:([A-Za-z0-9][A-Za-z0-9_-]{0,63})\}\}|\$\{e2b\.secrets\.([A-Za-z0-9][A-Za-z0-9_-]{0,63})\}`)

// SecretRefs are the secrets a header value's placeholders name, lower
// case, in order, with repeats.
func SecretRefs(value string) []string {
	var out []string
	for _, m := range secretPlaceholder.FindAllStringSubmatch(value, -1) {
		out = append(out, strings.ToLower(m[1]+m[2]))
	}
	return out
}

// FillSecrets replaces a header value's placeholders with what lookup
// gives for each name (lower case); the first error stops it.
func FillSecrets(value string, lookup func(name string) (string, error)) (string, error) {
	var firstErr error
	out := secretPlaceholder.ReplaceAllStringFunc(value, func(m string) string {
		sub := secretPlaceholder.FindStringSubmatch(m)
		name := strings.ToLower(sub[1] + sub[2])
		v, err := lookup(name)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("secret %q: %w", name, err)
		}
		return v
	})
	if firstErr != nil {
		return "", firstErr
	}
	return out, nil
}

// WithoutSecretRefs is value with its whole placeholders taken out, for
// checking that no broken one is left.
func WithoutSecretRefs(value string) string { return secretPlaceholder.ReplaceAllString(value, "") }

// RuleHosts are the hosts of a policy's rules whose headers name secret.
func (p NetworkPolicy) RuleHosts(secret string) []string {
	var out []string
	for host, list := range p.Rules {
		for _, r := range list {
			if r.Transform == nil {
				continue
			}
			for _, v := range r.Transform.Headers {
				if slices.Contains(SecretRefs(v), secret) && !slices.Contains(out, host) {
					out = append(out, host)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
