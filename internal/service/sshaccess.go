package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// ResolveSandbox finds the caller's sandbox by its id, its name or a
// prefix of its id that no other of the caller's sandboxes shares, as the
// CLI does. Another owner's sandbox is not found, whichever way it is
// named.
func (s *Service) ResolveSandbox(ctx context.Context, ref string) (sandpit.Sandbox, error) {
	if ref == "" {
		return sandpit.Sandbox{}, fmt.Errorf("no sandbox named: %w", sandpit.ErrNotFound)
	}
	sb, err := s.GetSandboxByIDOrName(ctx, ref)
	if !errors.Is(err, sandpit.ErrNotFound) {
		return sb, err
	}
	var match []sandpit.Sandbox
	opts := sandpit.ListOptions{Limit: 500}
	for {
		page, next, err := s.ListSandboxes(ctx, opts)
		if err != nil {
			return sandpit.Sandbox{}, err
		}
		for _, c := range page {
			if strings.HasPrefix(c.ID, ref) {
				match = append(match, c)
			}
		}
		if next == "" {
			break
		}
		opts.PageToken = next
	}
	switch len(match) {
	case 0:
		return sandpit.Sandbox{}, fmt.Errorf("no sandbox %q: %w", ref, sandpit.ErrNotFound)
	case 1:
		return match[0], nil
	}
	return sandpit.Sandbox{}, invalidf("%q matches %d sandboxes; use more of the id", ref, len(match))
}

// DialSandbox opens a TCP connection to port of the caller's running
// sandbox, on the sandbox's own address: what an SSH local forward (ssh -L)
// reaches. It needs the execute right, since whoever may run code in the
// sandbox can reach its ports from inside anyway; the agent's port is
// refused (only the daemon talks to the agent). A server must listen on
// the sandbox's interface (0.0.0.0), as for previews.
func (s *Service) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	if !identity.Of(ctx).May(sandpit.ActionExecute) {
		return nil, fmt.Errorf("%w: forwarding to a sandbox's port needs the execute right", sandpit.ErrForbidden)
	}
	if port < 1 || port > 65535 {
		return nil, invalidf("port must be 1-65535")
	}
	if port == agentapi.Port {
		return nil, fmt.Errorf("%w: port %d is the sandbox agent's", ErrPortForbidden, port)
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return nil, err
	}
	ip, err := s.sandboxIP(ctx, id)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return d.DialContext(dctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
}

// SSH access tokens look like "spssh<prefix><secret>" in hex only, so
// that they fit anywhere an SSH user name does: 12 hex digits of public
// prefix, by which the store finds the row, and 48 of secret. Only the
// SHA-256 of the whole token is stored.
const (
	sshTokenMarker    = "spssh"
	sshTokenPrefixLen = 12
	sshTokenSecretLen = 48
	sshTokenLen       = len(sshTokenMarker) + sshTokenPrefixLen + sshTokenSecretLen
	// DefaultSSHAccess and MaxSSHAccess bound how long an SSH token
	// admits logins.
	DefaultSSHAccess = time.Hour
	MaxSSHAccess     = 24 * time.Hour
)

// SSHAccess is a minted SSH token: the secret, returned once.
type SSHAccess struct {
	// ID is the token's public prefix, by which it is stored and named.
	ID        string
	Token     string
	SandboxID string
	ExpiresAt time.Time
}

// CreateSSHAccess mints a token that logs into the caller's sandbox over
// SSH until it expires (Daytona's ssh-access): `ssh TOKEN@HOST`, or the
// token as the password of `ssh SANDBOX@HOST`. A retry with the same
// Idempotency-Key is answered with the same token, so it mints one.
func (s *Service) CreateSSHAccess(ctx context.Context, idOrName string, valid time.Duration) (out SSHAccess, err error) {
	defer func() { s.audit(ctx, "ssh_access.create", out.SandboxID, err) }()
	if !identity.Of(ctx).May(sandpit.ActionExecute) {
		return SSHAccess{}, fmt.Errorf("%w: SSH access needs the execute right", sandpit.ErrForbidden)
	}
	if valid == 0 {
		valid = DefaultSSHAccess
	}
	if valid < time.Minute || valid > MaxSSHAccess {
		return SSHAccess{}, invalidf("an SSH token is valid for 1 to %d minutes", int(MaxSSHAccess/time.Minute))
	}
	sb, err := s.GetSandboxByIDOrName(ctx, idOrName)
	if err != nil {
		return SSHAccess{}, err
	}
	var b [(sshTokenPrefixLen + sshTokenSecretLen) / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return SSHAccess{}, err
	}
	token := sshTokenMarker + hex.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	now := s.now()
	t := sandpit.SSHToken{Prefix: token[len(sshTokenMarker) : len(sshTokenMarker)+sshTokenPrefixLen], SecretHash: sum[:],
		Owner: sb.Owner, SandboxID: sb.ID, CreatedBy: identity.Of(ctx).TokenName, ExpiresAt: now.Add(valid)}
	if err := s.store.CreateSSHToken(ctx, t, now); err != nil {
		return SSHAccess{}, err
	}
	return SSHAccess{ID: t.Prefix, Token: token, SandboxID: sb.ID, ExpiresAt: t.ExpiresAt.UTC()}, nil
}

// RevokeSSHAccess removes every SSH token of the caller's sandbox and ends
// the sessions logged in with them.
func (s *Service) RevokeSSHAccess(ctx context.Context, idOrName string) (err error) {
	defer func() { s.audit(ctx, "ssh_access.revoke", idOrName, err) }()
	sb, err := s.GetSandboxByIDOrName(ctx, idOrName)
	if err != nil {
		return err
	}
	prefixes, err := s.store.DeleteSSHTokens(ctx, sb.ID)
	for _, p := range prefixes {
		s.ids.EndSessions(identity.SSHSession(p), identity.ErrTokenRevoked)
	}
	return err
}

// RevokeSSHToken removes one SSH token of the caller's sandbox and ends
// the sessions logged in with it. Revoking a token that is already gone
// (a retry) is not an error; a string that is not an SSH token is.
func (s *Service) RevokeSSHToken(ctx context.Context, idOrName, token string) (err error) {
	defer func() { s.audit(ctx, "ssh_access.revoke", idOrName, err) }()
	if !LooksLikeSSHToken(token) {
		return invalidf("not an SSH access token")
	}
	sb, err := s.GetSandboxByIDOrName(ctx, idOrName)
	if err != nil {
		return err
	}
	prefix := token[len(sshTokenMarker) : len(sshTokenMarker)+sshTokenPrefixLen]
	if _, err := s.store.DeleteSSHToken(ctx, sb.ID, prefix); err != nil {
		return err
	}
	s.ids.EndSessions(identity.SSHSession(prefix), identity.ErrTokenRevoked)
	return nil
}

// ValidateSSHAccess reports whether token logs into a sandbox of the
// caller's, and which. Another owner's token is not valid for the caller,
// so that validation tells nothing about other owners' sandboxes.
func (s *Service) ValidateSSHAccess(ctx context.Context, token string) (sandboxID string, valid bool, err error) {
	p, id, err := s.SSHTokenPrincipal(ctx, token)
	if errors.Is(err, sandpit.ErrUnauthorized) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if caller := identity.Of(ctx); !caller.Admin && caller.Owner != p.Owner {
		return "", false, nil
	}
	return id, true, nil
}

// LooksLikeSSHToken reports whether s has the shape of an SSH access token.
func LooksLikeSSHToken(s string) bool {
	if len(s) != sshTokenLen || !strings.HasPrefix(s, sshTokenMarker) {
		return false
	}
	_, err := hex.DecodeString(s[len(sshTokenMarker):])
	return err == nil
}

// SSHTokenPrincipal is who a login with an SSH access token acts as, and
// the one sandbox it may enter: the sandbox's owner, with the rights of a
// sandboxes:write token. An unknown, wrong or expired token is
// sandpit.ErrUnauthorized.
func (s *Service) SSHTokenPrincipal(ctx context.Context, token string) (sandpit.Principal, string, error) {
	if !LooksLikeSSHToken(token) {
		return sandpit.Principal{}, "", fmt.Errorf("%w: not an SSH token", sandpit.ErrUnauthorized)
	}
	prefix := token[len(sshTokenMarker) : len(sshTokenMarker)+sshTokenPrefixLen]
	t, err := s.store.GetSSHToken(ctx, prefix)
	if errors.Is(err, sandpit.ErrNotFound) {
		return sandpit.Principal{}, "", fmt.Errorf("%w: unknown SSH token", sandpit.ErrUnauthorized)
	}
	if err != nil {
		return sandpit.Principal{}, "", err
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], t.SecretHash) != 1 {
		return sandpit.Principal{}, "", fmt.Errorf("%w: unknown SSH token", sandpit.ErrUnauthorized)
	}
	if !s.now().Before(t.ExpiresAt) {
		return sandpit.Principal{}, "", fmt.Errorf("%w: the SSH token expired", sandpit.ErrUnauthorized)
	}
	return sandpit.Principal{
		TokenName:   "ssh-token:" + prefix,
		Owner:       t.Owner,
		Scopes:      []string{sandpit.ScopeSandboxesWrite},
		TokenPrefix: identity.SSHSession(prefix),
	}, t.SandboxID, nil
}

// ValidateEnv checks variables a surface passes to a command it starts
// through the agent itself (an SSH session's env requests), as Exec checks
// its own: names of the shell's grammar, none reserved, no NUL in values.
func (s *Service) ValidateEnv(env map[string]string) error { return validateEnv(env) }
