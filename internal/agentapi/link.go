package agentapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Link is the daemon's HTTP connection to the agents: one pooled client for
// every call (Connect RPCs, files, init), whose transport the API's relay
// shares, and a short one for health probes. It is part of the contract so
// that the domain calls the agents without speaking HTTP itself.
type Link struct {
	hc    *http.Client
	probe *http.Client
}

// NewLink returns a link with its own connection pool.
func NewLink() *Link {
	// No overall timeout: a command's stream lasts as long as the command,
	// a file transfer as long as the file.
	transport := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	return &Link{hc: &http.Client{Transport: transport}, probe: &http.Client{Timeout: 2 * time.Second}}
}

// Client is the pooled client (for NewClients and the agent's plain HTTP
// endpoints).
func (l *Link) Client() *http.Client { return l.hc }

// Do sends req on the pooled client.
func (l *Link) Do(req *http.Request) (*http.Response, error) { return l.hc.Do(req) }

// Transport is the pooled client's transport, for a proxy that relays to
// the agents on the same connections.
func (l *Link) Transport() http.RoundTripper { return l.hc.Transport }

// CloseIdleConnections closes the pool's idle connections.
func (l *Link) CloseIdleConnections() { l.hc.CloseIdleConnections() }

// Init sends the agent at ip its init call, authenticated with token.
// refused is the status the agent answered with when it did not take it
// ("" when it did); err is a failure to reach it.
func (l *Link) Init(ctx context.Context, ip, token string, req InitRequest) (refused string, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL(ip, InitPath), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set(AccessTokenHeader, token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(hr)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return resp.Status, nil
	}
	return "", nil
}

// Healthy asks the agent at ip once whether it serves (HealthPath), within
// ctx and the probe's own two seconds.
func (l *Link) Healthy(ctx context.Context, ip string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, agentURL(ip, HealthPath), nil)
	resp, err := l.probe.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 300
}

func agentURL(ip, path string) string {
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(Port)) + path
}
