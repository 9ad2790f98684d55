package service

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// sshKeyNameRE is the grammar of a key's name: what `ssh-keygen -C` usually
// writes (user@host) fits.
var sshKeyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}$`)

// ErrSSHKeyRemoved ends the SSH sessions of a key when it is removed (the
// cause of their context).
var ErrSSHKeyRemoved = errors.New("the SSH key was removed")

// sshSessionPrefix registers an SSH login's sessions in the session
// registry under its key, so that removing the key ends them.
const sshSessionPrefix = "ssh:"

// fingerprintPrefix starts every key fingerprint (SHA-256, as ssh-keygen
// -l prints it); no key name may start with it.
const fingerprintPrefix = "SHA256:"

// ParseSSHPublicKey parses one authorized_keys line ("ssh-ed25519 AAAA...
// comment") and returns the key and its comment. Certificates and RSA keys
// under 2048 bits are refused.
func ParseSSHPublicKey(line string) (ssh.PublicKey, string, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, "", invalidf("public_key is required (one line of authorized_keys, as in ~/.ssh/id_ed25519.pub)")
	}
	if strings.ContainsAny(line, "\r\n") {
		return nil, "", invalidf("public_key must be one key on one line")
	}
	pk, comment, options, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, "", invalidf("public_key is not an SSH public key: %v", err)
	}
	if len(options) > 0 {
		return nil, "", invalidf("public_key must carry no authorized_keys options")
	}
	if _, ok := pk.(*ssh.Certificate); ok {
		return nil, "", invalidf("SSH certificates are not supported; register the plain public key")
	}
	if cpk, ok := pk.(ssh.CryptoPublicKey); ok {
		if r, ok := cpk.CryptoPublicKey().(*rsa.PublicKey); ok && r.N.BitLen() < 2048 {
			return nil, "", invalidf("RSA keys must have at least 2048 bits (this one has %d)", r.N.BitLen())
		}
	}
	return pk, comment, nil
}

// AddSSHKey registers a public key for SSH logins as the caller's owner.
// It is idempotent by key: the same key again returns the row it has
// (AlreadyBound), so a retried add never makes a second key. A key another
// owner registered is refused (ErrSSHKeyTaken): the key alone says whom a
// login acts as. name defaults to the key's comment.
func (s *Service) AddSSHKey(ctx context.Context, name, publicKey string) (k sandpit.SSHKey, outcome sandpit.AddOutcome, err error) {
	defer func() { s.audit(ctx, "ssh_key.add", k.Fingerprint, err) }()
	pk, comment, err := ParseSSHPublicKey(publicKey)
	if err != nil {
		return sandpit.SSHKey{}, 0, err
	}
	fp := ssh.FingerprintSHA256(pk)
	if name == "" {
		name = comment
		if !sshKeyNameRE.MatchString(name) || strings.HasPrefix(name, fingerprintPrefix) {
			name = "key-" + strings.TrimPrefix(fp, "SHA256:")[:12]
			name = strings.NewReplacer("/", "_", "+", "-").Replace(name)
		}
	}
	if !sshKeyNameRE.MatchString(name) || strings.HasPrefix(name, fingerprintPrefix) {
		return sandpit.SSHKey{}, 0, invalidf("key name must be 1-128 letters, digits, '_', '.', '@', ':', '+' or '-', and not start with %s", fingerprintPrefix)
	}
	return s.store.AddSSHKey(ctx, sandpit.SSHKey{
		Fingerprint: fp, Owner: identity.OwnerOf(ctx), Name: name, Type: pk.Type(),
		PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))),
	}, s.now())
}

// ListSSHKeys lists the caller's owner's keys; an admin's lists every
// owner's.
func (s *Service) ListSSHKeys(ctx context.Context) ([]sandpit.SSHKey, error) {
	owner := identity.OwnerOf(ctx)
	if identity.Of(ctx).Admin {
		owner = ""
	}
	return s.store.ListSSHKeys(ctx, owner)
}

// DeleteSSHKey removes the caller's key named by its fingerprint or name
// (an admin may remove any owner's by fingerprint), and ends the SSH
// sessions logged in with it. Another owner's key is not found.
func (s *Service) DeleteSSHKey(ctx context.Context, ref string) (err error) {
	defer func() { s.audit(ctx, "ssh_key.delete", ref, err) }()
	if ref == "" {
		return invalidf("a key fingerprint or name is required")
	}
	if strings.HasPrefix(ref, fingerprintPrefix) {
		// A fingerprint in a URL path is written URL-safe: its base64
		// has '/' and '+', and a '/' would split the path.
		ref = fingerprintPrefix + strings.NewReplacer("_", "/", "-", "+").Replace(strings.TrimPrefix(ref, fingerprintPrefix))
	}
	owner := identity.OwnerOf(ctx)
	if identity.Of(ctx).Admin && strings.HasPrefix(ref, fingerprintPrefix) {
		owner = ""
	}
	k, err := s.store.DeleteSSHKey(ctx, owner, ref)
	if err != nil {
		return err
	}
	s.sessions.end(sshKeySession(k.Owner, k.Fingerprint), ErrSSHKeyRemoved, false)
	return nil
}

// SSHKeyPrincipals are who an SSH login with the public key may act as:
// each owner who registered the key, with the rights of a sandboxes:write
// token on that owner's sandboxes only (never an admin's, even for a key
// the admin registered). The login's sandbox decides which of them it is;
// the key is accepted only for its owners' sandboxes. A key nobody
// registered is sandpit.ErrUnauthorized.
func (s *Service) SSHKeyPrincipals(ctx context.Context, pk ssh.PublicKey) ([]sandpit.Principal, error) {
	fp := ssh.FingerprintSHA256(pk)
	keys, err := s.store.SSHKeysByFingerprint(ctx, fp)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: unknown SSH key %s", sandpit.ErrUnauthorized, fp)
	}
	out := make([]sandpit.Principal, 0, len(keys))
	for _, k := range keys {
		out = append(out, sandpit.Principal{
			TokenName:   "ssh-key:" + k.Name,
			Owner:       k.Owner,
			Scopes:      []string{sandpit.ScopeSandboxesWrite},
			TokenPrefix: sshKeySession(k.Owner, fp),
		})
	}
	return out, nil
}

// sshKeySession names the sessions of logins with one owner's registration
// of a key: removing it ends those, not another owner's with the same key.
func sshKeySession(owner, fingerprint string) string {
	return sshSessionPrefix + owner + " " + fingerprint
}

// SSHKeyUsed records a login with the owner's key (at most once a minute).
func (s *Service) SSHKeyUsed(ctx context.Context, owner string, pk ssh.PublicKey) {
	fp := ssh.FingerprintSHA256(pk)
	if err := s.store.TouchSSHKey(ctx, owner, fp, s.now(), time.Minute); err != nil {
		s.log.Warn("record ssh key use", "fingerprint", fp, "owner", owner, "err", err)
	}
}

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
		s.sessions.end(sshSessionPrefix+p, ErrTokenRevoked, false)
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
	s.sessions.end(sshSessionPrefix+prefix, ErrTokenRevoked, false)
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
		TokenPrefix: sshSessionPrefix + prefix,
	}, t.SandboxID, nil
}

// ValidateEnv checks variables a surface passes to a command it starts
// through the agent itself (an SSH session's env requests), as Exec checks
// its own: names of the shell's grammar, none reserved, no NUL in values.
func (s *Service) ValidateEnv(env map[string]string) error { return validateEnv(env) }
