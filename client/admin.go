package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// The admin wire types are the server's own (package apitypes).
type (
	Token        = apitypes.Token
	Limits       = apitypes.Limits
	TokenRequest = apitypes.TokenRequest
	OwnerLimits  = apitypes.OwnerLimits
	AuditEntry   = apitypes.AuditEntry
)

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
	var out apitypes.TokenList
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

// AuditOptions pages the audit log.
type AuditOptions struct {
	Owner string
	After int64 // entries after this sequence number
	Limit int
}

// Audit reads one page of the audit log (admin only) and the After of the
// next page.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) ([]AuditEntry, int64, error) {
	var out apitypes.AuditPage
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
