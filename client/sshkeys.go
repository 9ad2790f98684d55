package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// SSHKey is a public key registered for SSH into the owner's sandboxes.
type SSHKey = apitypes.SSHKey

// AddSSHKey registers a public key (one authorized_keys line) for SSH
// logins as the caller's owner; name "" takes the key's comment. It is safe
// to retry: the same key again returns the key registered already, and the
// call carries an Idempotency-Key too.
func (c *Client) AddSSHKey(ctx context.Context, name, publicKey string) (SSHKey, error) {
	var k SSHKey
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/ssh-keys",
		body: apitypes.AddSSHKeyRequest{Name: name, PublicKey: publicKey}, idempotent: true, keyed: true}, &k)
	return k, err
}

// SSHKeys lists the caller's owner's keys (an admin's: every owner's).
func (c *Client) SSHKeys(ctx context.Context) ([]SSHKey, error) {
	var out apitypes.ListSSHKeysResponse
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/ssh-keys", idempotent: true}, &out)
	return out.Keys, err
}

// DeleteSSHKey removes a key by its fingerprint (SHA256:...) or name; the
// SSH sessions logged in with it end.
func (c *Client) DeleteSSHKey(ctx context.Context, ref string) error {
	if fp, ok := strings.CutPrefix(ref, "SHA256:"); ok {
		// The fingerprint's base64 goes URL-safe into the path.
		ref = "SHA256:" + strings.NewReplacer("/", "_", "+", "-").Replace(fp)
	}
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/ssh-keys/" + url.PathEscape(ref), idempotent: true, keyed: true}, nil)
	return err
}

// SSHAccess is a short-lived SSH token for one sandbox.
type SSHAccess = apitypes.SSHAccess

// CreateSSHAccess mints an SSH token for the sandbox, valid for
// validMinutes (0: an hour): `ssh TOKEN@HOST -p PORT`. The call carries an
// Idempotency-Key, so a retry is answered with the same token.
func (c *Client) CreateSSHAccess(ctx context.Context, id string, validMinutes int) (SSHAccess, error) {
	var a SSHAccess
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ssh-access",
		body: apitypes.SSHAccessRequest{ValidMinutes: validMinutes}, idempotent: true, keyed: true}, &a)
	return a, err
}

// RevokeSSHAccess removes every SSH token of the sandbox; the sessions
// logged in with them end.
func (c *Client) RevokeSSHAccess(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ssh-access", idempotent: true, keyed: true}, nil)
	return err
}
