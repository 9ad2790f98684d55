package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Token describes a personal access token. Secret is set only in the answer
// to CreateToken: the daemon keeps a hash and can never show it again.
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

// Limits are an owner's quotas; 0 is unlimited.
type Limits struct {
	MaxSandboxes int64   `json:"max_sandboxes"`
	MaxCPU       float64 `json:"max_cpu"`
	MaxMemoryMB  int64   `json:"max_memory_mb"`
	MaxPorts     int64   `json:"max_ports"`
}

// TokenRequest creates a token. Owner defaults to Name and Scopes to
// sandboxes:write; Limits, when set, replace the owner's quotas.
type TokenRequest struct {
	Name       string   `json:"name"`
	Owner      string   `json:"owner,omitempty"`
	Scopes     []string `json:"scopes,omitempty"`
	ExpiresInS int64    `json:"expires_in_s,omitempty"`
	Limits     *Limits  `json:"limits,omitempty"`
}

// CreateToken mints a token (admin only). It is not retried: the daemon
// refuses a second live token of the same name, and a lost answer means the
// token must be revoked and made again, since its secret is not kept.
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (Token, error) {
	var t Token
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/tokens", body: req}, &t)
	return t, err
}

// ListTokens lists tokens (admin only).
func (c *Client) ListTokens(ctx context.Context, includeRevoked bool) ([]Token, error) {
	var out struct {
		Tokens []Token `json:"tokens"`
	}
	q := url.Values{}
	if includeRevoked {
		q.Set("include_revoked", "true")
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/tokens", query: q, idempotent: true}, &out)
	return out.Tokens, err
}

// RevokeToken revokes a live token by name or prefix (admin only).
func (c *Client) RevokeToken(ctx context.Context, nameOrPrefix string) (Token, error) {
	var t Token
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/tokens/" + url.PathEscape(nameOrPrefix)}, &t)
	return t, err
}

// OwnerLimits is an owner's quotas and current usage.
type OwnerLimits struct {
	Owner  string `json:"owner"`
	Limits Limits `json:"limits"`
	Usage  struct {
		Sandboxes int64   `json:"sandboxes"`
		CPU       float64 `json:"cpu"`
		MemoryMB  int64   `json:"memory_mb"`
		Ports     int64   `json:"ports"`
	} `json:"usage"`
}

// GetOwnerLimits reads an owner's quotas and usage (admin, or the owner).
func (c *Client) GetOwnerLimits(ctx context.Context, owner string) (OwnerLimits, error) {
	var out OwnerLimits
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/owners/" + url.PathEscape(owner) + "/limits", idempotent: true}, &out)
	return out, err
}

// SetOwnerLimits replaces an owner's quotas (admin only); a PUT, so a retry
// sets the same values again.
func (c *Client) SetOwnerLimits(ctx context.Context, owner string, l Limits) (OwnerLimits, error) {
	var out OwnerLimits
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/owners/" + url.PathEscape(owner) + "/limits", body: l, idempotent: true}, &out)
	return out, err
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

// AuditOptions pages the audit log.
type AuditOptions struct {
	Owner string
	After int64 // entries after this sequence number
	Limit int
}

// Audit reads one page of the audit log (admin only) and the After of the
// next page.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) ([]AuditEntry, int64, error) {
	var out struct {
		Entries   []AuditEntry `json:"entries"`
		NextAfter int64        `json:"next_after"`
	}
	q := url.Values{}
	if opts.Owner != "" {
		q.Set("owner", opts.Owner)
	}
	if opts.After > 0 {
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q, idempotent: true}, &out)
	return out.Entries, out.NextAfter, err
}
