package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// Secret is a stored secret as the daemon tells of it: never its value.
type Secret = apitypes.Secret

// CreateSecret stores the caller's secret. The same name with the same
// value again (a retry) returns the secret it has; with another value it is
// refused (409 name_conflict): use SetSecret to replace a value.
func (c *Client) CreateSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/secrets",
		body: apitypes.CreateSecretRequest{Name: name, Value: value}, idempotent: true, keyed: true}, &s)
	return s, err
}

// UpdateSecret replaces the value of the caller's secret.
func (c *Client) UpdateSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/secrets/" + url.PathEscape(name),
		body: apitypes.UpdateSecretRequest{Value: value}, idempotent: true, keyed: true}, &s)
	return s, err
}

// Secret returns one of the caller's secrets by name or id.
func (c *Client) Secret(ctx context.Context, ref string) (Secret, error) {
	var s Secret
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets/" + url.PathEscape(ref), idempotent: true}, &s)
	return s, err
}

// Secrets lists the caller's secrets.
func (c *Client) Secrets(ctx context.Context) ([]Secret, error) {
	var out apitypes.ListSecretsResponse
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets", idempotent: true}, &out)
	return out.Secrets, err
}

// DeleteSecret deletes one of the caller's secrets by name or id.
func (c *Client) DeleteSecret(ctx context.Context, ref string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + url.PathEscape(ref), idempotent: true, keyed: true}, nil)
	return err
}
