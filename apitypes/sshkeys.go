package apitypes

import "time"

// CodeSSHKeyTaken: the public key is registered by another owner (a key
// names one owner, since an SSH login presents nothing else).
const CodeSSHKeyTaken = "ssh_key_taken"

// SSHKey is a public key an owner registered for SSH into its sandboxes.
type SSHKey struct {
	Fingerprint string     `json:"fingerprint"`
	Name        string     `json:"name"`
	Owner       string     `json:"owner"`
	Type        string     `json:"type"`
	PublicKey   string     `json:"public_key"`
	CreatedAt   time.Time  `json:"created_at"`
	LastUsedAt  *time.Time `json:"last_used_at,omitempty"`
}

// AddSSHKeyRequest is the body of POST /v1/ssh-keys: one authorized_keys
// line, and a name (default: the key's comment).
type AddSSHKeyRequest struct {
	Name      string `json:"name,omitempty"`
	PublicKey string `json:"public_key"`
}

// ListSSHKeysResponse is the body of GET /v1/ssh-keys.
type ListSSHKeysResponse struct {
	Keys []SSHKey `json:"keys"`
}

// SSHAccessRequest is the body of POST /v1/sandboxes/{id}/ssh-access.
type SSHAccessRequest struct {
	// ValidMinutes is how long the token admits logins (default 60, at
	// most 1440).
	ValidMinutes int `json:"valid_minutes,omitempty"`
}

// SSHAccess is a minted SSH token for one sandbox: `ssh TOKEN@HOST -p
// PORT`, or TOKEN as the password of `ssh SANDBOX@HOST -p PORT`.
type SSHAccess struct {
	Token     string    `json:"token"`
	SandboxID string    `json:"sandbox_id"`
	ExpiresAt time.Time `json:"expires_at"`
}
