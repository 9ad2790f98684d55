package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/apitypes"
)

type (
	// Volume is named storage that outlives the sandboxes mounting it.
	Volume = apitypes.Volume
	// VolumeMount mounts a volume into a sandbox at create.
	VolumeMount = apitypes.VolumeMount
)

// CreateVolume makes the caller's volume of the name, or returns the one it
// has. It is safe to retry: a create is idempotent by name, and the call
// carries an Idempotency-Key too.
func (c *Client) CreateVolume(ctx context.Context, name string) (Volume, error) {
	return c.CreateVolumeWith(ctx, apitypes.CreateVolumeRequest{Name: name})
}

// CreateVolumeWith is CreateVolume with the request's options (a size).
func (c *Client) CreateVolumeWith(ctx context.Context, req apitypes.CreateVolumeRequest) (Volume, error) {
	var v Volume
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/volumes", body: req, idempotent: true, keyed: true}, &v)
	return v, err
}

// Volume returns one of the caller's volumes by name or id.
func (c *Client) Volume(ctx context.Context, ref string) (Volume, error) {
	var v Volume
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/volumes/" + url.PathEscape(ref), idempotent: true}, &v)
	return v, err
}

// Volumes lists the caller's volumes.
func (c *Client) Volumes(ctx context.Context) ([]Volume, error) {
	var out apitypes.ListVolumesResponse
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/volumes", idempotent: true}, &out)
	return out.Volumes, err
}

// DeleteVolume deletes a volume by name or id; a volume a sandbox mounts is
// refused (409 volume_in_use).
func (c *Client) DeleteVolume(ctx context.Context, ref string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/volumes/" + url.PathEscape(ref), idempotent: true, keyed: true}, nil)
	return err
}
