package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// ExposePort exposes a sandbox port over "http" or "tcp". Retrying it returns
// the same exposure; no second host port is consumed.
func (c *Client) ExposePort(ctx context.Context, id string, port int, protocol string) (Port, error) {
	var p Port
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports",
		body: apitypes.ExposeRequest{Port: port, Protocol: protocol}, idempotent: true, keyed: true}, &p)
	return p, err
}

// ListPorts lists a sandbox's exposures.
func (c *Client) ListPorts(ctx context.Context, id string) ([]Port, error) {
	var out apitypes.PortList
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports", idempotent: true}, &out)
	return out.Ports, err
}

// UnexposePort removes an exposure.
func (c *Client) UnexposePort(ctx context.Context, id string, port int) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(port), idempotent: true, keyed: true}, nil)
	return err
}

// AddDomain binds hostname to a sandbox port.
func (c *Client) AddDomain(ctx context.Context, id, hostname string, port int) (Domain, error) {
	var d Domain
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains",
		body: apitypes.DomainRequest{Hostname: hostname, Port: port}, idempotent: true, keyed: true}, &d)
	return d, err
}

// RemoveDomain unbinds a hostname.
func (c *Client) RemoveDomain(ctx context.Context, id, hostname string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains/" + url.PathEscape(hostname), idempotent: true, keyed: true}, nil)
	return err
}

// ListDomains lists a sandbox's hostnames.
func (c *Client) ListDomains(ctx context.Context, id string) ([]Domain, error) {
	var out apitypes.DomainList
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains", idempotent: true}, &out)
	return out.Domains, err
}
