package sandpit

import (
	"errors"
	"time"
)

// ErrSSHKeyTaken refuses a public key another owner has registered. A key
// names the owner an SSH login acts as, so one key belongs to one owner.
var ErrSSHKeyTaken = errors.New("this public key is registered by another owner")

// SSHKey is one public key an owner registered for SSH logins into its
// sandboxes (sandpit ssh-key add). The fingerprint (SHA256:..., as
// ssh-keygen -l prints it) is unique over the whole daemon, so the key an
// SSH client presents names exactly one owner; the name is unique per owner.
type SSHKey struct {
	Fingerprint string
	Owner       string
	Name        string
	// Type is the key's algorithm (ssh-ed25519, ssh-rsa, ...), PublicKey
	// the key in authorized_keys form without a comment.
	Type       string
	PublicKey  string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero = never used
}

// SSHToken is a short-lived SSH credential for one sandbox, as stored: its
// public prefix and the SHA-256 of the whole token, never the token.
type SSHToken struct {
	Prefix     string
	SecretHash []byte
	Owner      string
	SandboxID  string
	CreatedBy  string // the name of the API token that made it
	CreatedAt  time.Time
	ExpiresAt  time.Time
}
