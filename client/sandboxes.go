package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

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
	// Stats is one sample of a sandbox's resource use.
	Stats = apitypes.Stats
	// Domain is a custom hostname bound to a sandbox port.
	Domain = apitypes.Domain
	// Event is one sandbox state change.
	Event = apitypes.Event
	// Network is a sandbox's own egress policy.
	Network = apitypes.Network
	// NetworkRule is one rule of a host in Network.Rules.
	NetworkRule = apitypes.NetworkRule
	// NetworkTransform is what a rule changes in a request.
	NetworkTransform = apitypes.NetworkTransform
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

// Stats samples a running sandbox's resource use.
func (c *Client) Stats(ctx context.Context, id string) (Stats, error) {
	var st Stats
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/stats", idempotent: true}, &st)
	return st, err
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
	return c.ExecIO(ctx, id, req, ExecStreams{Stdout: stdout, Stderr: stderr})
}

// TTYSize is a terminal's size in characters.
type TTYSize struct{ Cols, Rows uint16 }

// ExecStreams are what ExecIO connects a command to.
type ExecStreams struct {
	// Stdin, when set, feeds the command's stdin (its terminal under a
	// TTY); the end of Stdin closes the command's stdin. Nil gives the
	// command an empty stdin, so that a command reading it never waits.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY, when set, runs the command under a pseudo-terminal of that
	// size; its output then all comes on Stdout, as from a terminal.
	TTY *TTYSize
	// Resize carries the terminal's new sizes while the command runs.
	Resize <-chan TTYSize
}

// ExecIO runs a command with its streams connected to s, through the agent
// protocol the daemon proxies, and returns its exit code. It is never
// retried: running a command twice is not the same as once.
func (c *Client) ExecIO(ctx context.Context, id string, req ExecRequest, s ExecStreams) (int, error) {
	if req.TimeoutS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutS)*time.Second)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	pc := processconnect.NewProcessClient(daemonErrors{c.http}, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/agent", connect.WithProtoJSON())
	cfg := &process.ProcessConfig{Cmd: req.Cmd, Args: req.Args, Envs: req.Env}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	start := &process.StartRequest{Process: cfg}
	if s.Stdin != nil {
		start.Stdin = proto.Bool(true)
	}
	if s.TTY != nil {
		start.Pty = &process.PTY{Size: &process.PTY_Size{Cols: uint32(s.TTY.Cols), Rows: uint32(s.TTY.Rows)}}
	}
	sreq := connect.NewRequest(start)
	c.authed(sreq)
	stream, err := pc.Start(ctx, sreq)
	if err != nil {
		return -1, err
	}
	defer stream.Close()
	code := -1
	write := func(w io.Writer, b []byte) error {
		if len(b) == 0 || w == nil {
			return nil
		}
		_, err := w.Write(b)
		return err
	}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if st := ev.GetStart(); st != nil {
			sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st.GetPid()}}
			if s.Stdin != nil {
				go c.feedInput(ctx, pc, sel, s.Stdin, s.TTY != nil)
			}
			if s.Resize != nil {
				go c.followResize(ctx, pc, sel, s.Resize)
			}
		}
		if d := ev.GetData(); d != nil {
			if err := write(s.Stdout, d.GetStdout()); err != nil {
				return -1, err
			}
			if err := write(s.Stderr, d.GetStderr()); err != nil {
				return -1, err
			}
			if err := write(s.Stdout, d.GetPty()); err != nil {
				return -1, err
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

// authed puts the client's token on an agent-protocol request.
func (c *Client) authed(r interface{ Header() http.Header }) {
	r.Header().Set("Authorization", "Bearer "+c.token)
}

// feedInput sends in to the process in chunks as they are read, then closes
// its stdin (a terminal has no stdin to close: the user's exit ends it).
func (c *Client) feedInput(ctx context.Context, pc processconnect.ProcessClient, sel *process.ProcessSelector, in io.Reader, tty bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			input := &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}
			if tty {
				input.Input = &process.ProcessInput_Pty{Pty: append([]byte(nil), buf[:n]...)}
			}
			req := connect.NewRequest(&process.SendInputRequest{Process: sel, Input: input})
			c.authed(req)
			if _, serr := pc.SendInput(ctx, req); serr != nil {
				return
			}
		}
		if err != nil {
			if !tty {
				req := connect.NewRequest(&process.CloseStdinRequest{Process: sel})
				c.authed(req)
				_, _ = pc.CloseStdin(ctx, req)
			}
			return
		}
	}
}

// followResize passes the terminal's new sizes on to the process's PTY.
func (c *Client) followResize(ctx context.Context, pc processconnect.ProcessClient, sel *process.ProcessSelector, sizes <-chan TTYSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			req := connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: uint32(sz.Cols), Rows: uint32(sz.Rows)}}})
			c.authed(req)
			_, _ = pc.Update(ctx, req)
		}
	}
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

// UpdateNetwork replaces a sandbox's egress policy (a field left out is
// cleared) for the connections that start after it returns. Sending the
// same policy again changes nothing, so it is retried like a read.
func (c *Client) UpdateNetwork(ctx context.Context, id string, n Network) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/sandboxes/" + url.PathEscape(id) + "/network", body: n, idempotent: true}, &sb)
	return sb, err
}

// Resources is a change of a sandbox's cpu and memory limits.
type Resources = apitypes.Resources

// Resize sets a sandbox's cpu and memory limits (a zero field keeps what the
// sandbox has), at once and for later starts, like `docker update`. The same
// figures again change nothing, so it is retried like a read.
func (c *Client) Resize(ctx context.Context, id string, r Resources) (Sandbox, error) {
	var sb Sandbox
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/v1/sandboxes/" + url.PathEscape(id) + "/resources", body: r, idempotent: true}, &sb)
	return sb, err
}

// NetworkDenied is a sandbox's recent refused connections and DNS answers,
// and the names it used in learn mode.
type NetworkDenied = apitypes.NetworkDenied

// NetworkDenials reads what the egress proxy refused a sandbox lately.
func (c *Client) NetworkDenials(ctx context.Context, id string) (NetworkDenied, error) {
	var out NetworkDenied
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/network/denied", idempotent: true}, &out)
	return out, err
}
