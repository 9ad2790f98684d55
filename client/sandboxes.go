package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

// Sandbox is a sandbox as the API returns it.
type Sandbox struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Image     string            `json:"image"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels"`
	Env       map[string]string `json:"env"`
	CPU       float64           `json:"cpu,omitempty"`
	MemoryMB  int64             `json:"memory_mb,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	EndAt     *time.Time        `json:"end_at,omitempty"`
	Network   *Network          `json:"network,omitempty"`
}

// Network is a sandbox's own egress policy. Egress "public" (the default)
// leaves the daemon's policy (public addresses only); "none" refuses every
// destination not in Allow. Allow and Deny hold IPv4 CIDRs or addresses;
// an address in both is allowed.
type Network struct {
	Egress string   `json:"egress,omitempty"`
	Allow  []string `json:"allow,omitempty"`
	Deny   []string `json:"deny,omitempty"`
}

// CreateRequest creates a sandbox.
type CreateRequest struct {
	Image    string            `json:"image,omitempty"`
	Name     string            `json:"name,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	CPU      float64           `json:"cpu,omitempty"`
	MemoryMB int64             `json:"memory_mb,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
	Network  *Network          `json:"network,omitempty"`
}

// Create makes a sandbox. It is safe to retry: the call carries an
// Idempotency-Key, and retries reuse it.
func (c *Client) Create(ctx context.Context, req CreateRequest) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes", body: req, idempotent: true, keyed: true}, &sb)
	return sb, err
}

// Get returns a sandbox.
func (c *Client) Get(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id), idempotent: true}, &sb)
	return sb, err
}

// ListOptions filters a listing.
type ListOptions struct {
	Labels    map[string]string
	Limit     int
	PageToken string
}

// List returns one page of sandboxes and the next page's token ("" at the end).
func (c *Client) List(ctx context.Context, opts ListOptions) ([]Sandbox, string, error) {
	q := url.Values{}
	for k, v := range opts.Labels {
		q.Add("label", k+"="+v)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.PageToken != "" {
		q.Set("page_token", opts.PageToken)
	}
	var out struct {
		Sandboxes     []Sandbox `json:"sandboxes"`
		NextPageToken string    `json:"next_page_token"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes", query: q, idempotent: true}, &out)
	return out.Sandboxes, out.NextPageToken, err
}

// Delete removes a sandbox.
func (c *Client) Delete(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id), idempotent: true, keyed: true}, nil)
	return err
}

// Start starts a stopped sandbox.
func (c *Client) Start(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/start", idempotent: true, keyed: true}, &sb)
	return sb, err
}

// Stop stops a sandbox.
func (c *Client) Stop(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/stop", idempotent: true, keyed: true}, &sb)
	return sb, err
}

// ExecRequest runs a command.
type ExecRequest struct {
	Cmd      string            `json:"cmd"`
	Args     []string          `json:"args,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
}

// ExecResult is a finished command.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Exec runs a command to completion. It is never retried: running a command
// twice is not the same as running it once.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/exec", body: req}, &res)
	return res, err
}

// ExecStream runs a command and streams its output as it comes, through the
// agent protocol the daemon proxies. It returns the exit code.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (int, error) {
	if req.TimeoutS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutS)*time.Second)
		defer cancel()
	}
	pc := processconnect.NewProcessClient(c.http, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/agent", connect.WithProtoJSON())
	cfg := &process.ProcessConfig{Cmd: req.Cmd, Args: req.Args, Envs: req.Env}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	creq := connect.NewRequest(&process.StartRequest{Process: cfg})
	creq.Header().Set("Authorization", "Bearer "+c.token)
	stream, err := pc.Start(ctx, creq)
	if err != nil {
		return -1, err
	}
	defer stream.Close()
	code := -1
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			if len(d.GetStdout()) > 0 && stdout != nil {
				if _, err := stdout.Write(d.GetStdout()); err != nil {
					return -1, err
				}
			}
			if len(d.GetStderr()) > 0 && stderr != nil {
				if _, err := stderr.Write(d.GetStderr()); err != nil {
					return -1, err
				}
			}
		}
		if e := ev.GetEnd(); e != nil {
			code = int(e.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil {
		return -1, err
	}
	return code, nil
}

// WriteFile writes r to path inside the sandbox.
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte) error {
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/sandboxes/" + url.PathEscape(id) + "/files",
		query: url.Values{"path": {path}}, raw: data, idempotent: true,
		header: http.Header{"Content-Type": {"application/octet-stream"}}}, nil)
	return err
}

// ReadFile copies the file at path inside the sandbox to w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/files",
		query: url.Values{"path": {path}}}, w)
	return err
}
