package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// Personal access tokens look like "spt_<prefix>_<secret>": the prefix is 12
// hex digits, public, and what the store looks the token up by; the secret is
// 32 random bytes. Only SHA-256 of the whole token is stored, and a presented
// token's hash is compared with it in constant time. A 256-bit random secret
// needs no slow password hash: there is nothing to guess.
const (
	tokenMarker    = "spt_"
	tokenPrefixLen = 12
	// lastUsedEvery bounds how often a token's last use is written.
	lastUsedEvery = time.Minute
)

// TokenMarker starts every personal access token, so that other parts of
// the daemon (the preview proxy) can recognise one without a lookup.
const TokenMarker = tokenMarker

var (
	ownerRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)
	tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$`)
)

// KnownScopes are the scopes a token may carry.
func KnownScopes() []string {
	return []string{sandpit.ScopeAdmin, sandpit.ScopeSandboxesWrite, sandpit.ScopeSandboxesRead}
}

// TokenRequest is a token create.
type TokenRequest struct {
	Name  string
	Owner string // default: Name
	// Scopes default to sandboxes:write.
	Scopes    []string
	ExpiresIn time.Duration // 0 = never
	// Limits, when any is set, replace the owner's quotas.
	Limits sandpit.OwnerLimits
}

// CreatedToken is a new token: the secret is returned once and never stored.
type CreatedToken struct {
	Token  sandpit.Token
	Secret string
}

// ErrTokenNameTaken is a create of a name a live token already has.
var ErrTokenNameTaken = store.ErrTokenNameTaken

// CreateToken mints a personal access token (admin only).
func (s *Service) CreateToken(ctx context.Context, req TokenRequest) (_ CreatedToken, err error) {
	if err := RequireAdmin(ctx); err != nil {
		return CreatedToken{}, err
	}
	defer func() { s.audit(ctx, "token.create", req.Name, err) }()
	if !tokenNameRE.MatchString(req.Name) {
		return CreatedToken{}, invalidf("token name must be 1-128 letters, digits, '_', '.', '@', ':' or '-'")
	}
	if req.Owner == "" {
		req.Owner = req.Name
	}
	if !ownerRE.MatchString(req.Owner) {
		return CreatedToken{}, invalidf("owner must be 1-128 letters, digits, '_', '.', '@' or '-'")
	}
	if strings.EqualFold(req.Owner, sandpit.AdminOwner) {
		// The admin token's owner sees every admin-made sandbox and its
		// environment; a personal token never shares it.
		return CreatedToken{}, invalidf("owner %q is reserved for the daemon's admin token", req.Owner)
	}
	if len(req.Scopes) == 0 {
		req.Scopes = []string{sandpit.ScopeSandboxesWrite}
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(KnownScopes(), sc) {
			return CreatedToken{}, invalidf("unknown scope %q (known: %s)", sc, strings.Join(KnownScopes(), ", "))
		}
	}
	if req.ExpiresIn < 0 {
		return CreatedToken{}, invalidf("expiry must not be negative")
	}
	l := req.Limits
	if l.MaxSandboxes < 0 || l.MaxCPU < 0 || l.MaxMemoryMB < 0 || l.MaxPorts < 0 {
		return CreatedToken{}, invalidf("limits must not be negative")
	}
	var pre [tokenPrefixLen / 2]byte
	var secret [32]byte
	if _, err := rand.Read(pre[:]); err != nil {
		return CreatedToken{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return CreatedToken{}, err
	}
	prefix := hex.EncodeToString(pre[:])
	full := tokenMarker + prefix + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(full))
	now := s.now()
	t := sandpit.Token{Prefix: prefix, Name: req.Name, Owner: req.Owner, Scopes: slices.Compact(slices.Sorted(slices.Values(req.Scopes))),
		SecretHash: sum[:], CreatedAt: now}
	if req.ExpiresIn > 0 {
		t.ExpiresAt = now.Add(req.ExpiresIn)
	}
	if err := s.store.CreateToken(ctx, t); err != nil {
		return CreatedToken{}, err
	}
	if !l.Unlimited() {
		l.Owner = req.Owner
		if err := s.SetOwnerLimits(ctx, l); err != nil {
			return CreatedToken{}, err
		}
	}
	return CreatedToken{Token: t, Secret: full}, nil
}

// ListTokens lists tokens (admin only); never their secrets.
func (s *Service) ListTokens(ctx context.Context, includeRevoked bool) ([]sandpit.Token, error) {
	if err := RequireAdmin(ctx); err != nil {
		return nil, err
	}
	return s.store.ListTokens(ctx, includeRevoked)
}

// RevokeToken revokes a live token by name or prefix (admin only). The next
// request carrying it is refused: authentication reads the store every time;
// and the event streams, sockets and terminals opened with it are closed
// (see OpenSession).
func (s *Service) RevokeToken(ctx context.Context, nameOrPrefix string) (_ sandpit.Token, err error) {
	if err := RequireAdmin(ctx); err != nil {
		return sandpit.Token{}, err
	}
	t, err := s.store.RevokeToken(ctx, nameOrPrefix, s.now())
	if err == nil {
		// The token's open sessions end before the revocation is
		// acknowledged, so nothing reaches them after the caller is told.
		s.sessions.revoke(t.Prefix)
	}
	name := t.Name
	if name == "" {
		name = nameOrPrefix
	}
	s.audit(ctx, "token.revoke", name, err)
	return t, err
}

// AuthenticateToken resolves a presented personal access token to its
// principal, or fails with sandpit.ErrUnauthorized (malformed, unknown, revoked or
// expired, deliberately not told apart). The error never contains the token.
func (s *Service) AuthenticateToken(ctx context.Context, presented string) (sandpit.Principal, error) {
	rest, ok := strings.CutPrefix(presented, tokenMarker)
	if !ok || len(rest) < tokenPrefixLen+2 || rest[tokenPrefixLen] != '_' {
		return sandpit.Principal{}, sandpit.ErrUnauthorized
	}
	t, err := s.store.GetTokenByPrefix(ctx, rest[:tokenPrefixLen])
	if errors.Is(err, sandpit.ErrNotFound) {
		return sandpit.Principal{}, sandpit.ErrUnauthorized
	}
	if err != nil {
		return sandpit.Principal{}, err
	}
	sum := sha256.Sum256([]byte(presented))
	if subtle.ConstantTimeCompare(sum[:], t.SecretHash) != 1 {
		return sandpit.Principal{}, sandpit.ErrUnauthorized
	}
	now := s.now()
	if !t.RevokedAt.IsZero() || (!t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)) {
		return sandpit.Principal{}, sandpit.ErrUnauthorized
	}
	// The row just read says when the token was last recorded, so the
	// write (a write transaction on the one connection) happens only when
	// the record is stale, not on every request.
	if now.Sub(t.LastUsedAt) >= lastUsedEvery {
		if err := s.store.TouchToken(ctx, t.Prefix, now, lastUsedEvery); err != nil {
			s.log.Warn("record token use", "token", t.Name, "err", err)
		}
	}
	return sandpit.Principal{TokenName: t.Name, Owner: t.Owner, Scopes: t.Scopes, Admin: slices.Contains(t.Scopes, sandpit.ScopeAdmin),
		TokenPrefix: t.Prefix, ExpiresAt: t.ExpiresAt}, nil
}

// SetOwnerLimits replaces an owner's quotas (admin only); all zero removes
// them. Lowering a limit below what the owner holds removes nothing: it
// refuses the owner's next create.
func (s *Service) SetOwnerLimits(ctx context.Context, l sandpit.OwnerLimits) (err error) {
	if err := RequireAdmin(ctx); err != nil {
		return err
	}
	defer func() { s.audit(ctx, "owner.limits", l.Owner, err) }()
	if !ownerRE.MatchString(l.Owner) {
		return invalidf("invalid owner %q", l.Owner)
	}
	if l.MaxSandboxes < 0 || l.MaxCPU < 0 || l.MaxMemoryMB < 0 || l.MaxPorts < 0 || l.MaxDomains < 0 ||
		l.DefaultCPU < 0 || l.DefaultMemoryMB < 0 || l.MaxSandboxCPU < 0 || l.MaxSandboxMemoryMB < 0 ||
		math.IsNaN(l.MaxCPU) || math.IsNaN(l.DefaultCPU) || math.IsNaN(l.MaxSandboxCPU) {
		return invalidf("limits must not be negative")
	}
	if l.MaxSandboxCPU > 0 && l.DefaultCPU > l.MaxSandboxCPU {
		return invalidf("default_cpu %g exceeds max_sandbox_cpu %g", l.DefaultCPU, l.MaxSandboxCPU)
	}
	if l.MaxSandboxMemoryMB > 0 && l.DefaultMemoryMB > l.MaxSandboxMemoryMB {
		return invalidf("default_memory_mb %d exceeds max_sandbox_memory_mb %d", l.DefaultMemoryMB, l.MaxSandboxMemoryMB)
	}
	if l.DefaultMemoryMB > 0 && l.DefaultMemoryMB < 16 {
		return invalidf("default_memory_mb must be at least 16")
	}
	cidrs, err := s.checkGrants(l.AllowPrivateCIDRs)
	if err != nil {
		return err
	}
	l.AllowPrivateCIDRs = cidrs
	return s.store.SetOwnerLimits(ctx, l, s.now())
}

// OwnerUsage is what an owner holds now. The surfaces name it through the
// identity aggregate, which keeps them from importing the store.
type OwnerUsage = store.OwnerUsage

// OwnerLimits returns an owner's quotas and current usage (admin, or the
// owner itself).
func (s *Service) OwnerLimits(ctx context.Context, owner string) (sandpit.OwnerLimits, store.OwnerUsage, error) {
	if p := Of(ctx); !p.Admin && p.Owner != owner {
		return sandpit.OwnerLimits{}, store.OwnerUsage{}, fmt.Errorf("owner %q: %w", owner, sandpit.ErrNotFound)
	}
	l, err := s.store.GetOwnerLimits(ctx, owner)
	if err != nil {
		return l, store.OwnerUsage{}, err
	}
	u, err := s.store.GetOwnerUsage(ctx, owner)
	return l, u, err
}

// ListAudit reads the audit log (admin only).
func (s *Service) ListAudit(ctx context.Context, q sandpit.AuditQuery) ([]sandpit.AuditEntry, error) {
	if err := RequireAdmin(ctx); err != nil {
		return nil, err
	}
	return s.store.ListAudit(ctx, q)
}

// RunAuditRetention deletes audit entries older than retention every
// interval until ctx ends. The log is otherwise append-only.
func (s *Service) RunAuditRetention(ctx context.Context, retention, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := s.store.ReapAudit(ctx, s.now().Add(-retention)); err != nil && ctx.Err() == nil {
			s.log.Error("audit retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
