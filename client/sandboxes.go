package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

// The wire types are the daemon's own (package apitypes); the aliases keep
// the SDK's names.
type (
	// Sandbox is a sandbox as the API returns it.
	Sandbox = apitypes.Sandbox
	// CreateRequest creates a sandbox.
	CreateRequest = apitypes.CreateRequest
	// ExecRequest runs a command.
	ExecRequest = apitypes.ExecRequest
	// ExecResult is a finished command.
	ExecResult = apitypes.ExecResult
	// Port is an exposure of a sandbox port.
	Port = apitypes.Port
	// Domain is a custom hostname bound to a sandbox port.
	Domain = apitypes.Domain
	// Event is one sandbox state change.
	Event = apitypes.Event
	// Network is a sandbox's own egress policy.
	Network = apitypes.Network
	// Lifecycle is what a sandbox's deadline does.
	Lifecycle = apitypes.Lifecycle
)

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
	var out apitypes.ListResponse
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

// Pause pauses a running sandbox: mode "memory" (the default, "") freezes
// its processes, "filesystem" stops its container and keeps its files.
func (c *Client) Pause(ctx context.Context, id, mode string) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/pause", body: apitypes.PauseRequest{Mode: mode}, idempotent: true, keyed: true}, &sb)
	return sb, err
}

// Resume resumes a paused sandbox (a filesystem pause boots anew).
func (c *Client) Resume(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/resume", idempotent: true, keyed: true}, &sb)
	return sb, err
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

// WriteFileProgress is WriteFile telling progress how many bytes have been
// sent so far (from 0 again if the upload is retried).
func (c *Client) WriteFileProgress(ctx context.Context, id, path string, data []byte, progress func(sent int64)) error {
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/sandboxes/" + url.PathEscape(id) + "/files",
		query: url.Values{"path": {path}}, raw: data, idempotent: true, progress: progress,
		header: http.Header{"Content-Type": {"application/octet-stream"}}}, nil)
	return err
}

// ReadFile copies the file at path inside the sandbox to w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/files",
		query: url.Values{"path": {path}}}, w)
	return err
}
