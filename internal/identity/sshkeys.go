package identity

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"
)

// sshKeyNameRE is the grammar of a key's name: what `ssh-keygen -C` usually
// writes (user@host) fits.
var sshKeyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}$`)

// ErrSSHKeyRemoved ends the SSH sessions of a key when it is removed (the
// cause of their context).
var ErrSSHKeyRemoved = errors.New("the SSH key was removed")

// sshSessionPrefix registers an SSH login's sessions in the session
// registry under its credential (a key or an SSH access token), so that
// removing the credential ends them.
const sshSessionPrefix = "ssh:"

// SSHSession is the session key of the SSH logins made with the credential
// named name: what a login's principal carries as its TokenPrefix, and what
// EndSessions ends when the credential goes.
func SSHSession(name string) string { return sshSessionPrefix + name }

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
		Fingerprint: fp, Owner: OwnerOf(ctx), Name: name, Type: pk.Type(),
		PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))),
	}, s.now())
}

// ListSSHKeys lists the caller's owner's keys; an admin's lists every
// owner's.
func (s *Service) ListSSHKeys(ctx context.Context) ([]sandpit.SSHKey, error) {
	owner := OwnerOf(ctx)
	if Of(ctx).Admin {
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
	owner := OwnerOf(ctx)
	if Of(ctx).Admin && strings.HasPrefix(ref, fingerprintPrefix) {
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
	return SSHSession(owner + " " + fingerprint)
}

// SSHKeyUsed records a login with the owner's key (at most once a minute).
func (s *Service) SSHKeyUsed(ctx context.Context, owner string, pk ssh.PublicKey) {
	fp := ssh.FingerprintSHA256(pk)
	if err := s.store.TouchSSHKey(ctx, owner, fp, s.now(), time.Minute); err != nil {
		s.log.Warn("record ssh key use", "fingerprint", fp, "owner", owner, "err", err)
	}
}
