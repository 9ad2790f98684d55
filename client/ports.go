package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Port is an exposure of a sandbox port.
type Port struct {
	Port      int       `json:"port"`
	Protocol  string    `json:"protocol"`
	HostPort  int       `json:"host_port"`
	PublicURL string    `json:"public_url"`
	Reused    bool      `json:"reused"`
	CreatedAt time.Time `json:"created_at"`
}

// ExposePort exposes a sandbox port over "http" or "tcp". Retrying it returns
// the same exposure; no second host port is consumed.
func (c *Client) ExposePort(ctx context.Context, id string, port int, protocol string) (Port, error) {
	var p Port
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports",
		body: map[string]any{"port": port, "protocol": protocol}, idempotent: true, keyed: true}, &p)
	return p, err
}

// ListPorts lists a sandbox's exposures.
func (c *Client) ListPorts(ctx context.Context, id string) ([]Port, error) {
	var out struct {
		Ports []Port `json:"ports"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports", idempotent: true}, &out)
	return out.Ports, err
}

// UnexposePort removes an exposure.
func (c *Client) UnexposePort(ctx context.Context, id string, port int) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(port), idempotent: true, keyed: true}, nil)
	return err
}

// Domain is a custom hostname bound to a sandbox port.
type Domain struct {
	Hostname  string    `json:"hostname"`
	SandboxID string    `json:"sandbox_id"`
	Port      int       `json:"port"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
}

// AddDomain binds hostname to a sandbox port.
func (c *Client) AddDomain(ctx context.Context, id, hostname string, port int) (Domain, error) {
	var d Domain
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains",
		body: map[string]any{"hostname": hostname, "port": port}, idempotent: true, keyed: true}, &d)
	return d, err
}

// RemoveDomain unbinds a hostname.
func (c *Client) RemoveDomain(ctx context.Context, id, hostname string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains/" + url.PathEscape(hostname), idempotent: true, keyed: true}, nil)
	return err
}

// ListDomains lists a sandbox's hostnames.
func (c *Client) ListDomains(ctx context.Context, id string) ([]Domain, error) {
	var out struct {
		Domains []Domain `json:"custom_domains"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/custom-domains", idempotent: true}, &out)
	return out.Domains, err
}
