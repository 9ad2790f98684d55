package apitypes

import "time"

// Limits are an owner's quotas; 0 is unlimited.
type Limits struct {
	MaxSandboxes int64   `json:"max_sandboxes"`
	MaxCPU       float64 `json:"max_cpu"`
	MaxMemoryMB  int64   `json:"max_memory_mb"`
	MaxPorts     int64   `json:"max_ports"`
	MaxDomains   int64   `json:"max_domains"`
	// Per-sandbox defaults and caps; 0 leaves the daemon's.
	DefaultCPU         float64 `json:"default_cpu,omitempty"`
	DefaultMemoryMB    int64   `json:"default_memory_mb,omitempty"`
	MaxSandboxCPU      float64 `json:"max_sandbox_cpu,omitempty"`
	MaxSandboxMemoryMB int64   `json:"max_sandbox_memory_mb,omitempty"`
	// AllowPrivateCIDRs are the private or reserved IPv4 ranges the owner's
	// sandboxes may open with a network allow list (default none).
	AllowPrivateCIDRs []string `json:"allow_private_cidrs,omitempty"`
}

// IsZero reports limits with nothing set.
func (l Limits) IsZero() bool {
	return l.MaxSandboxes == 0 && l.MaxCPU == 0 && l.MaxMemoryMB == 0 && l.MaxPorts == 0 && l.MaxDomains == 0 &&
		l.DefaultCPU == 0 && l.DefaultMemoryMB == 0 && l.MaxSandboxCPU == 0 && l.MaxSandboxMemoryMB == 0 &&
		len(l.AllowPrivateCIDRs) == 0
}

// TokenRequest is the body of POST /v1/tokens. Owner defaults to Name and
// Scopes to sandboxes:write; Limits, when given with any non-zero field,
// replace the owner's quotas.
type TokenRequest struct {
	Name       string   `json:"name"`
	Owner      string   `json:"owner,omitempty"`
	Scopes     []string `json:"scopes,omitempty"`
	ExpiresInS int64    `json:"expires_in_s,omitempty"`
	Limits     *Limits  `json:"limits,omitempty"`
}

// Token is a token's public description. Secret is set only in the answer to
// its creation: the daemon keeps a hash and can never show it again.
type Token struct {
	Name       string     `json:"name"`
	Owner      string     `json:"owner"`
	Prefix     string     `json:"prefix"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	Secret     string     `json:"token,omitempty"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// Usage is what an owner holds now, counted against its Limits.
type Usage struct {
	Sandboxes int64   `json:"sandboxes"`
	CPU       float64 `json:"cpu"`
	MemoryMB  int64   `json:"memory_mb"`
	Ports     int64   `json:"ports"`
	Domains   int64   `json:"domains"`
}

// OwnerLimits is the body of GET and PUT /v1/owners/{owner}/limits answers.
type OwnerLimits struct {
	Owner  string `json:"owner"`
	Limits Limits `json:"limits"`
	Usage  Usage  `json:"usage"`
}

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	Seq       int64     `json:"seq"`
	At        time.Time `json:"at"`
	TokenName string    `json:"token_name"`
	Owner     string    `json:"owner"`
	Action    string    `json:"action"`
	Resource  string    `json:"resource"`
	Outcome   string    `json:"outcome"`
	Detail    string    `json:"detail,omitempty"`
}

// AuditPage is one page of the audit log; pass NextAfter as after for the
// next page.
type AuditPage struct {
	Entries   []AuditEntry `json:"entries"`
	NextAfter int64        `json:"next_after"`
}

// WarmPoolStatus is the body of GET /v1/pool (schema PoolStatus): the warm
// pool's adoption counters and, per pool, its free slots. The pool part of
// GET /v1/status is the short PoolStatus.
type WarmPoolStatus struct {
	Hits   int64  `json:"hits"`
	Misses int64  `json:"misses"`
	Pools  []Pool `json:"pools"`
	// Auto: images no --warm-pool pins get pools sized from their
	// creates, each at most AutoMax, all together at most AutoTotal.
	Auto      bool `json:"auto"`
	AutoMax   int  `json:"auto_max,omitempty"`
	AutoTotal int  `json:"auto_total,omitempty"`
	// MemoryLimitMB is the sum of the free pooled sandboxes' memory
	// limits: the most the pool may take (at rest, a few MiB each).
	MemoryLimitMB int64 `json:"memory_limit_mb"`
}

// Pool is one configured warm pool.
type Pool struct {
	Image    string `json:"image"`
	User     string `json:"user,omitempty"`
	Size     int    `json:"size"`
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
	// Auto: the size follows the image's creates (it is not pinned).
	Auto bool `json:"auto,omitempty"`
}

// ScopeTable is the body of GET /v1/scopes: what each token scope allows,
// and the action every route of every surface performs. docs/tokens.md
// prints the same table, and a test keeps the two equal.
type ScopeTable struct {
	Scopes []ScopeActions `json:"scopes"`
	Routes []RouteAction  `json:"routes"`
}

// ScopeActions is one scope and the actions it allows.
type ScopeActions struct {
	Scope   string   `json:"scope"`
	Actions []string `json:"actions"`
}

// RouteAction is one route: its surface's mount point ("/v1" routes are
// written in full), its method and path pattern, its action and, for a
// route whose action depends on the request, how it is decided.
type RouteAction struct {
	Surface string `json:"surface"`
	Pattern string `json:"pattern"`
	Action  string `json:"action"`
	Note    string `json:"note,omitempty"`
}
