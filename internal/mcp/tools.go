package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/client"
)

// Bounds on a tool call's arguments.
const (
	defaultCommandTimeoutS = 120
	maxCommandTimeoutS     = 3600
	// maxFileBytes bounds a file read_file returns and write_file sends:
	// the content travels inside one JSON-RPC message, twice for text (as
	// text content and in the structured content), and the official
	// TypeScript client's stdio transport reads messages of at most 10 MiB.
	maxFileBytes = 4 << 20
	maxForks     = 10
	maxListDepth = 5
)

// NetworkInput is a sandbox's egress policy.
type NetworkInput struct {
	Egress       string   `json:"egress,omitempty" jsonschema:"public (the default: public addresses are reachable) or none (only what the allow lists name)"`
	Allow        []string `json:"allow,omitempty" jsonschema:"addresses or CIDRs the sandbox may reach"`
	Deny         []string `json:"deny,omitempty" jsonschema:"addresses or CIDRs the sandbox may not reach"`
	AllowDomains []string `json:"allow_domains,omitempty" jsonschema:"domain names the sandbox may reach (*.example.com for subdomains)"`
	DenyDomains  []string `json:"deny_domains,omitempty" jsonschema:"domain names the sandbox may not reach"`
	Profiles     []string `json:"profiles,omitempty" jsonschema:"named allow lists such as npm or pypi"`
	Mode         string   `json:"mode,omitempty" jsonschema:"learn: refuse nothing by name and record the names used"`
}

// CreateSandboxInput are create_sandbox's arguments.
type CreateSandboxInput struct {
	Image    string            `json:"image,omitempty" jsonschema:"container image to run; the daemon's default image when neither image nor template is given"`
	Template string            `json:"template,omitempty" jsonschema:"template to start from (name, name:tag or id), e.g. code-interpreter-v1"`
	Name     string            `json:"name,omitempty" jsonschema:"unique name for the sandbox"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables of every process in the sandbox"`
	Labels   map[string]string `json:"labels,omitempty" jsonschema:"labels to find the sandbox by"`
	CPU      float64           `json:"cpu,omitempty" jsonschema:"CPU limit in cores (default 1)"`
	MemoryMB int64             `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default 1024)"`
	TimeoutS int64             `json:"timeout_s,omitempty" jsonschema:"seconds until the sandbox is removed (0: the daemon's default)"`
	Network  *NetworkInput     `json:"network,omitempty" jsonschema:"egress policy"`
}

// SandboxOutput is a sandbox as the tools report it.
type SandboxOutput struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Image     string            `json:"image"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	CPU       float64           `json:"cpu,omitempty"`
	MemoryMB  int64             `json:"memory_mb,omitempty"`
	Network   *NetworkInput     `json:"network,omitempty"`
	CreatedAt string            `json:"created_at"`
	EndAt     string            `json:"end_at,omitempty"`
}

func sandboxOutput(sb client.Sandbox) SandboxOutput {
	o := SandboxOutput{ID: sb.ID, Name: sb.Name, Image: sb.Image, State: sb.State, Labels: sb.Labels, CPU: sb.CPU, MemoryMB: sb.MemoryMB,
		CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339)}
	if sb.EndAt != nil {
		o.EndAt = sb.EndAt.UTC().Format(time.RFC3339)
	}
	if n := sb.Network; n != nil {
		o.Network = &NetworkInput{Egress: n.Egress, Allow: n.Allow, Deny: n.Deny, AllowDomains: n.AllowDomains, DenyDomains: n.DenyDomains, Profiles: n.Profiles, Mode: n.Mode}
	}
	return o
}

func (o SandboxOutput) line() string {
	s := fmt.Sprintf("sandbox %s (%s, image %s)", o.ID, o.State, o.Image)
	if o.Name != "" {
		s = fmt.Sprintf("sandbox %s %q (%s, image %s)", o.ID, o.Name, o.State, o.Image)
	}
	return s
}

// SandboxInput names a sandbox.
type SandboxInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
}

// ListSandboxesInput are list_sandboxes' arguments.
type ListSandboxesInput struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only sandboxes with all these labels"`
}

// SandboxesOutput is a list of sandboxes.
type SandboxesOutput struct {
	Sandboxes []SandboxOutput `json:"sandboxes"`
}

// RunCommandInput are run_command's arguments.
type RunCommandInput struct {
	SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Command   string            `json:"command,omitempty" jsonschema:"shell command line, run with /bin/sh -c (give command or argv)"`
	Argv      []string          `json:"argv,omitempty" jsonschema:"program and arguments, run without a shell (give command or argv)"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutS  int64             `json:"timeout_s,omitempty" jsonschema:"seconds before the command is killed (default 120, at most 3600)"`
}

// RunCommandOutput is a finished command.
type RunCommandOutput struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
}

// RunCodeInput are run_code's arguments.
type RunCodeInput struct {
	SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id; it must run a code interpreter (template code-interpreter-v1)"`
	Code      string            `json:"code" jsonschema:"the code to run"`
	Language  string            `json:"language,omitempty" jsonschema:"python (the default), r, javascript, bash, ..."`
	Context   string            `json:"context,omitempty" jsonschema:"named context whose variables persist between runs"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutS  int64             `json:"timeout_s,omitempty" jsonschema:"seconds before the run is stopped (default 120, at most 3600)"`
}

// CodeResult is one result of a run: the cell's value or a display call.
type CodeResult struct {
	Main     bool   `json:"main,omitempty"`
	Text     string `json:"text,omitempty"`
	HTML     string `json:"html,omitempty"`
	Markdown string `json:"markdown,omitempty"`
	PNG      string `json:"png,omitempty"`
	SVG      string `json:"svg,omitempty"`
}

// CodeError is a run's uncaught exception.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// RunCodeOutput is a finished run of code.
type RunCodeOutput struct {
	Stdout  string       `json:"stdout"`
	Stderr  string       `json:"stderr"`
	Text    string       `json:"text,omitempty"`
	Results []CodeResult `json:"results,omitempty"`
	Error   *CodeError   `json:"error,omitempty"`
}

// WriteFileInput are write_file's arguments.
type WriteFileInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Path      string `json:"path" jsonschema:"absolute path of the file; missing directories are made"`
	Content   string `json:"content" jsonschema:"the file's content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64 for binary content"`
}

// FileOutput is a file written or read.
type FileOutput struct {
	Path     string `json:"path"`
	Bytes    int    `json:"bytes"`
	Content  string `json:"content,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

// ReadFileInput are read_file's arguments.
type ReadFileInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Path      string `json:"path" jsonschema:"absolute path of the file"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 or base64; by default utf-8 when the content is valid UTF-8, else base64"`
}

// ListFilesInput are list_files' arguments.
type ListFilesInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Path      string `json:"path" jsonschema:"absolute path of the directory"`
	Depth     int    `json:"depth,omitempty" jsonschema:"levels to descend (default 1, at most 5)"`
}

// FileEntry is one entry of a listing.
type FileEntry struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	Type     string `json:"type" jsonschema:"file, dir or symlink"`
	Size     int64  `json:"size"`
	Modified string `json:"modified,omitempty"`
}

// ListFilesOutput is a directory listing.
type ListFilesOutput struct {
	Path    string      `json:"path"`
	Entries []FileEntry `json:"entries"`
}

// ExposePortInput are expose_port's arguments.
type ExposePortInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Port      int    `json:"port" jsonschema:"the port a server in the sandbox listens on"`
	Protocol  string `json:"protocol,omitempty" jsonschema:"http (the default: a preview URL) or tcp (a host port)"`
}

// PortOutput is an exposed port.
type PortOutput struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	URL      string `json:"url"`
	HostPort int    `json:"host_port,omitempty"`
	Reused   bool   `json:"reused,omitempty"`
}

// SnapshotInput are snapshot_sandbox's arguments.
type SnapshotInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Name      string `json:"name,omitempty" jsonschema:"name of the snapshot (a new build of it when it exists); anonymous when empty"`
}

// SnapshotOutput is a snapshot.
type SnapshotOutput struct {
	ID            string `json:"id"`
	Name          string `json:"name,omitempty"`
	SourceSandbox string `json:"source_sandbox,omitempty"`
	State         string `json:"state,omitempty"`
}

// ForkInput are fork_sandbox's arguments.
type ForkInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as create_sandbox or list_sandboxes gave it"`
	Count     int    `json:"count,omitempty" jsonschema:"number of copies (default 1, at most 10)"`
	Name      string `json:"name,omitempty" jsonschema:"name of the copy (only with a count of 1)"`
	TimeoutS  int    `json:"timeout_s,omitempty" jsonschema:"each copy's time to live in seconds (0: the parent's remaining time)"`
}

// ForkOutput is a fork's copies.
type ForkOutput struct {
	Sandboxes []SandboxOutput `json:"sandboxes"`
	Errors    []string        `json:"errors,omitempty"`
}

// DeleteOutput is a deleted sandbox.
type DeleteOutput struct {
	Deleted string `json:"deleted"`
}

// begin returns what a tool handler works with: the client the request
// acts through and, for a keyed tool, the context carrying the call's
// Idempotency-Key.
func (s *server) begin(ctx context.Context, req *sdk.CallToolRequest, tool string, keyed bool) (context.Context, *client.Client, error) {
	var header http.Header
	if req != nil && req.Extra != nil {
		header = req.Extra.Header
	}
	c, err := s.cfg.Client(header)
	if err != nil {
		return ctx, nil, err
	}
	if keyed {
		var ss *sdk.ServerSession
		if req != nil {
			ss = req.Session
		}
		if id, session := requestID(req), s.session(ss); id != "" && session != "" {
			ctx = client.WithIdempotencyKey(ctx, IdempotencyKey(session, tool, id))
		}
	}
	return ctx, c, nil
}

func text(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (s *server) addTools(srv *sdk.Server) {
	sdk.AddTool(srv, &sdk.Tool{Name: "create_sandbox", Description: "Create a sandbox (an isolated Linux container) and wait until it runs. Returns its id, which every other tool takes. Re-sending the same call (the same request id) returns the same sandbox."},
		s.createSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_sandboxes", Description: "List your sandboxes.", Annotations: readOnly()}, s.listSandboxes)
	sdk.AddTool(srv, &sdk.Tool{Name: "get_sandbox", Description: "Describe one sandbox.", Annotations: readOnly()}, s.getSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_command", Description: "Run a command in a sandbox and wait for it to end. Returns its exit code, stdout and stderr; a non-zero exit code is a result, not an error."},
		s.runCommand)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_code", Description: "Run code on a sandbox's code interpreter (a sandbox made from template code-interpreter-v1). Returns what it printed, its results and its exception."},
		s.runCode)
	sdk.AddTool(srv, &sdk.Tool{Name: "write_file", Description: "Write a file in a sandbox, replacing it when it exists.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		s.writeFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "read_file", Description: "Read a file of a sandbox.", Annotations: readOnly()}, s.readFile)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_files", Description: "List a directory of a sandbox.", Annotations: readOnly()}, s.listFiles)
	sdk.AddTool(srv, &sdk.Tool{Name: "expose_port", Description: "Expose a port a server in the sandbox listens on and return its URL. Exposing it again returns the same URL.", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		s.exposePort)
	sdk.AddTool(srv, &sdk.Tool{Name: "snapshot_sandbox", Description: "Snapshot a sandbox's filesystem; create_sandbox with the snapshot's id (or name) as template starts from it."},
		s.snapshotSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "fork_sandbox", Description: "Make running copies of a sandbox from a snapshot of it."},
		s.forkSandbox)
	sdk.AddTool(srv, &sdk.Tool{Name: "delete_sandbox", Description: "Delete a sandbox and everything in it.", Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		s.deleteSandbox)
	s.addLifecycleTools(srv)
	s.addDesktopTools(srv)
}

func readOnly() *sdk.ToolAnnotations { return &sdk.ToolAnnotations{ReadOnlyHint: true} }

func ptr[T any](v T) *T { return &v }

// validate checks create_sandbox's arguments and builds the request.
func (in CreateSandboxInput) validate() (client.CreateRequest, error) {
	switch {
	case in.Image != "" && in.Template != "":
		return client.CreateRequest{}, badInput("give image or template, not both")
	case in.CPU < 0:
		return client.CreateRequest{}, badInput("cpu must not be negative")
	case in.MemoryMB < 0:
		return client.CreateRequest{}, badInput("memory_mb must not be negative")
	case in.TimeoutS < 0:
		return client.CreateRequest{}, badInput("timeout_s must not be negative")
	}
	req := client.CreateRequest{Image: in.Image, Template: in.Template, Name: in.Name, Env: in.Env, Labels: in.Labels,
		CPU: in.CPU, MemoryMB: in.MemoryMB, TimeoutS: in.TimeoutS}
	if n := in.Network; n != nil {
		req.Network = &client.Network{Egress: n.Egress, Allow: n.Allow, Deny: n.Deny, AllowDomains: n.AllowDomains, DenyDomains: n.DenyDomains, Profiles: n.Profiles, Mode: n.Mode}
	}
	return req, nil
}

func (s *server) createSandbox(ctx context.Context, req *sdk.CallToolRequest, in CreateSandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	creq, err := in.validate()
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "create_sandbox", true)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	sb, err := c.Create(ctx, creq)
	if err != nil {
		return nil, SandboxOutput{}, toolError("create_sandbox", err)
	}
	o := sandboxOutput(sb)
	return text("created %s", o.line()), o, nil
}

func (s *server) listSandboxes(ctx context.Context, req *sdk.CallToolRequest, in ListSandboxesInput) (*sdk.CallToolResult, SandboxesOutput, error) {
	ctx, c, err := s.begin(ctx, req, "list_sandboxes", false)
	if err != nil {
		return nil, SandboxesOutput{}, err
	}
	out, err := s.list(ctx, c, in.Labels)
	if err != nil {
		return nil, SandboxesOutput{}, toolError("list_sandboxes", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d sandboxes", len(out.Sandboxes))
	for _, o := range out.Sandboxes {
		b.WriteString("\n" + o.line())
	}
	return text("%s", b.String()), out, nil
}

// maxListed bounds list_sandboxes and the sandbox list resource.
const maxListed = 1000

func (s *server) list(ctx context.Context, c *client.Client, labels map[string]string) (SandboxesOutput, error) {
	out := SandboxesOutput{Sandboxes: []SandboxOutput{}}
	token := ""
	for {
		page, next, err := c.List(ctx, client.ListOptions{Labels: labels, PageToken: token})
		if err != nil {
			return out, err
		}
		for _, sb := range page {
			out.Sandboxes = append(out.Sandboxes, sandboxOutput(sb))
		}
		if next == "" || len(out.Sandboxes) >= maxListed {
			return out, nil
		}
		token = next
	}
}

func (in SandboxInput) validate() error {
	if strings.TrimSpace(in.SandboxID) == "" {
		return badInput("sandbox_id is required")
	}
	return nil
}

func (s *server) getSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	if err := in.validate(); err != nil {
		return nil, SandboxOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "get_sandbox", false)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	sb, err := c.Get(ctx, in.SandboxID)
	if err != nil {
		return nil, SandboxOutput{}, toolError("get_sandbox", err)
	}
	o := sandboxOutput(sb)
	return text("%s", o.line()), o, nil
}

func commandTimeout(t int64) (int64, error) {
	switch {
	case t < 0:
		return 0, badInput("timeout_s must not be negative")
	case t > maxCommandTimeoutS:
		return 0, badInput("timeout_s is at most %d", maxCommandTimeoutS)
	case t == 0:
		return defaultCommandTimeoutS, nil
	}
	return t, nil
}

// validate checks run_command's arguments and builds the request.
func (in RunCommandInput) validate() (client.ExecRequest, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return client.ExecRequest{}, err
	}
	timeout, err := commandTimeout(in.TimeoutS)
	if err != nil {
		return client.ExecRequest{}, err
	}
	req := client.ExecRequest{Cwd: in.Cwd, Env: in.Env, TimeoutS: timeout}
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return client.ExecRequest{}, badInput("give command or argv, not both")
	case in.Command != "":
		req.Cmd, req.Args = "/bin/sh", []string{"-c", in.Command}
	case len(in.Argv) > 0 && in.Argv[0] != "":
		req.Cmd, req.Args = in.Argv[0], in.Argv[1:]
	default:
		return client.ExecRequest{}, badInput("command (a shell command line) or argv (a program and its arguments) is required")
	}
	return req, nil
}

// runCommand is not keyed: the native API never replays a command's
// output (running it again is what a caller who sends it again asks for).
func (s *server) runCommand(ctx context.Context, req *sdk.CallToolRequest, in RunCommandInput) (*sdk.CallToolResult, RunCommandOutput, error) {
	ereq, err := in.validate()
	if err != nil {
		return nil, RunCommandOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "run_command", false)
	if err != nil {
		return nil, RunCommandOutput{}, err
	}
	res, err := c.Exec(ctx, in.SandboxID, ereq)
	if err != nil {
		return nil, RunCommandOutput{}, toolError("run_command", err)
	}
	out := RunCommandOutput{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated}
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d", res.ExitCode)
	if res.Stdout != "" {
		fmt.Fprintf(&b, "\nstdout:\n%s", res.Stdout)
	}
	if res.Stderr != "" {
		fmt.Fprintf(&b, "\nstderr:\n%s", res.Stderr)
	}
	if res.Truncated {
		b.WriteString("\n(output truncated)")
	}
	return text("%s", b.String()), out, nil
}

func (in RunCodeInput) validate() (client.CodeRequest, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return client.CodeRequest{}, err
	}
	if in.Code == "" {
		return client.CodeRequest{}, badInput("code is required")
	}
	timeout, err := commandTimeout(in.TimeoutS)
	if err != nil {
		return client.CodeRequest{}, err
	}
	return client.CodeRequest{Code: in.Code, Language: in.Language, Context: in.Context, Env: in.Env, TimeoutS: timeout}, nil
}

func (s *server) runCode(ctx context.Context, req *sdk.CallToolRequest, in RunCodeInput) (*sdk.CallToolResult, RunCodeOutput, error) {
	creq, err := in.validate()
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "run_code", false)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	ex, err := c.RunCode(ctx, in.SandboxID, creq, nil)
	if err != nil {
		return nil, RunCodeOutput{}, toolError("run_code", err)
	}
	out := RunCodeOutput{Stdout: strings.Join(ex.Stdout, ""), Stderr: strings.Join(ex.Stderr, ""), Text: ex.Text()}
	for _, r := range ex.Results {
		out.Results = append(out.Results, CodeResult{Main: r.IsMainResult, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, PNG: r.PNG, SVG: r.SVG})
	}
	var b strings.Builder
	if out.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s\n", out.Stdout)
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s\n", out.Stderr)
	}
	if out.Text != "" {
		fmt.Fprintf(&b, "result: %s\n", out.Text)
	}
	if e := ex.Error; e != nil {
		out.Error = &CodeError{Name: e.Name, Value: e.Value, Traceback: tracebackText(e.Traceback)}
		fmt.Fprintf(&b, "error: %s: %s\n", e.Name, e.Value)
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

// tracebackText is an interpreter's traceback, a string or a list of lines.
func tracebackText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "\n")
	}
	return string(raw)
}

func validPath(p string) error {
	if strings.TrimSpace(p) == "" {
		return badInput("path is required")
	}
	if strings.ContainsRune(p, 0) {
		return badInput("path must not contain NUL")
	}
	return nil
}

// validate checks write_file's arguments and decodes the content.
func (in WriteFileInput) validate() ([]byte, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return nil, err
	}
	if err := validPath(in.Path); err != nil {
		return nil, err
	}
	var data []byte
	switch in.Encoding {
	case "", "utf-8", "utf8":
		data = []byte(in.Content)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, badInput("content is not valid base64: %v", err)
		}
		data = b
	default:
		return nil, badInput("encoding must be utf-8 or base64, not %q", in.Encoding)
	}
	if len(data) > maxFileBytes {
		return nil, badInput("content is %d bytes; write_file takes at most %d (use run_command to fetch large files)", len(data), maxFileBytes)
	}
	return data, nil
}

func (s *server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, FileOutput, error) {
	data, err := in.validate()
	if err != nil {
		return nil, FileOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "write_file", false)
	if err != nil {
		return nil, FileOutput{}, err
	}
	if err := c.WriteFile(ctx, in.SandboxID, in.Path, data); err != nil {
		return nil, FileOutput{}, toolError("write_file", err)
	}
	return text("wrote %d bytes to %s", len(data), in.Path), FileOutput{Path: in.Path, Bytes: len(data)}, nil
}

func (in ReadFileInput) validate() error {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return err
	}
	if err := validPath(in.Path); err != nil {
		return err
	}
	switch in.Encoding {
	case "", "utf-8", "utf8", "base64":
		return nil
	}
	return badInput("encoding must be utf-8 or base64, not %q", in.Encoding)
}

// errTooLarge is a file over maxFileBytes.
var errTooLarge = errors.New("file too large")

// cappedBuffer keeps at most max bytes and fails past them. The buffer is
// a field, not embedded, so that io.Copy cannot go around Write through
// bytes.Buffer's ReadFrom.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		return 0, fmt.Errorf("%w: larger than %d bytes", errTooLarge, b.max)
	}
	return b.buf.Write(p)
}

// readBytes reads a file, at most maxFileBytes of it.
func readBytes(ctx context.Context, c *client.Client, id, path string) ([]byte, error) {
	buf := &cappedBuffer{max: maxFileBytes}
	if err := c.ReadFile(ctx, id, path, buf); err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, badInput("%s is larger than %d bytes; read it in parts with run_command", path, maxFileBytes)
		}
		return nil, err
	}
	return buf.buf.Bytes(), nil
}

func (s *server) readFile(ctx context.Context, req *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, FileOutput, error) {
	if err := in.validate(); err != nil {
		return nil, FileOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "read_file", false)
	if err != nil {
		return nil, FileOutput{}, err
	}
	data, err := readBytes(ctx, c, in.SandboxID, in.Path)
	if err != nil {
		return nil, FileOutput{}, toolError("read_file", err)
	}
	out := FileOutput{Path: in.Path, Bytes: len(data)}
	switch {
	case in.Encoding == "base64" || (in.Encoding == "" && !utf8.Valid(data)):
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	case !utf8.Valid(data):
		return nil, FileOutput{}, badInput("%s is not valid UTF-8; read it with encoding base64", in.Path)
	default:
		out.Content, out.Encoding = string(data), "utf-8"
	}
	if out.Encoding == "base64" && len(out.Content) > maxInlineBase64 {
		// The structured content carries the bytes; repeating a large
		// blob as text would double the answer for nothing a model reads.
		return text("read %d bytes of binary content from %s (base64 in the structured content)", len(data), in.Path), out, nil
	}
	return text("%s", out.Content), out, nil
}

// maxInlineBase64 bounds the base64 a read_file repeats as text.
const maxInlineBase64 = 64 << 10

func (in ListFilesInput) validate() error {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return err
	}
	if err := validPath(in.Path); err != nil {
		return err
	}
	if in.Depth < 0 || in.Depth > maxListDepth {
		return badInput("depth is between 1 and %d", maxListDepth)
	}
	return nil
}

func (s *server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in ListFilesInput) (*sdk.CallToolResult, ListFilesOutput, error) {
	if err := in.validate(); err != nil {
		return nil, ListFilesOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "list_files", false)
	if err != nil {
		return nil, ListFilesOutput{}, err
	}
	entries, err := c.ListDir(ctx, in.SandboxID, in.Path, in.Depth)
	if err != nil {
		return nil, ListFilesOutput{}, toolError("list_files", err)
	}
	out := ListFilesOutput{Path: in.Path, Entries: []FileEntry{}}
	var b strings.Builder
	for _, e := range entries {
		fe := FileEntry{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size}
		if !e.Modified.IsZero() {
			fe.Modified = e.Modified.UTC().Format(time.RFC3339)
		}
		out.Entries = append(out.Entries, fe)
		fmt.Fprintf(&b, "%s\t%d\t%s\n", fe.Type, fe.Size, fe.Path)
	}
	if b.Len() == 0 {
		b.WriteString("(empty)")
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (in ExposePortInput) validate() (string, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return "", err
	}
	if in.Port < 1 || in.Port > 65535 {
		return "", badInput("port must be between 1 and 65535, not %d", in.Port)
	}
	switch in.Protocol {
	case "", "http":
		return "http", nil
	case "tcp":
		return "tcp", nil
	}
	return "", badInput("protocol must be http or tcp, not %q", in.Protocol)
}

func (s *server) exposePort(ctx context.Context, req *sdk.CallToolRequest, in ExposePortInput) (*sdk.CallToolResult, PortOutput, error) {
	proto, err := in.validate()
	if err != nil {
		return nil, PortOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "expose_port", true)
	if err != nil {
		return nil, PortOutput{}, err
	}
	p, err := c.ExposePort(ctx, in.SandboxID, in.Port, proto)
	if err != nil {
		return nil, PortOutput{}, toolError("expose_port", err)
	}
	out := PortOutput{Port: p.Port, Protocol: p.Protocol, URL: p.PublicURL, HostPort: p.HostPort, Reused: p.Reused}
	return text("port %d is at %s", p.Port, p.PublicURL), out, nil
}

func (s *server) snapshotSandbox(ctx context.Context, req *sdk.CallToolRequest, in SnapshotInput) (*sdk.CallToolResult, SnapshotOutput, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return nil, SnapshotOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "snapshot_sandbox", true)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	t, err := c.Snapshot(ctx, in.SandboxID, client.SnapshotRequest{Name: in.Name})
	if err != nil {
		return nil, SnapshotOutput{}, toolError("snapshot_sandbox", err)
	}
	out := SnapshotOutput{ID: t.ID, Name: t.Name, SourceSandbox: t.SourceSandbox}
	if t.Build != nil {
		out.State = t.Build.State
	}
	return text("snapshot %s of sandbox %s", t.ID, in.SandboxID), out, nil
}

func (in ForkInput) validate() (client.ForkRequest, error) {
	if err := (SandboxInput{in.SandboxID}).validate(); err != nil {
		return client.ForkRequest{}, err
	}
	switch {
	case in.Count < 0 || in.Count > maxForks:
		return client.ForkRequest{}, badInput("count is between 1 and %d", maxForks)
	case in.Name != "" && in.Count > 1:
		return client.ForkRequest{}, badInput("name is only for a count of 1")
	case in.TimeoutS < 0:
		return client.ForkRequest{}, badInput("timeout_s must not be negative")
	}
	return client.ForkRequest{Count: in.Count, Name: in.Name, TimeoutS: in.TimeoutS}, nil
}

func (s *server) forkSandbox(ctx context.Context, req *sdk.CallToolRequest, in ForkInput) (*sdk.CallToolResult, ForkOutput, error) {
	freq, err := in.validate()
	if err != nil {
		return nil, ForkOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "fork_sandbox", true)
	if err != nil {
		return nil, ForkOutput{}, err
	}
	forks, err := c.Fork(ctx, in.SandboxID, freq)
	if err != nil {
		return nil, ForkOutput{}, toolError("fork_sandbox", err)
	}
	out := ForkOutput{Sandboxes: []SandboxOutput{}}
	var b strings.Builder
	for _, f := range forks {
		switch {
		case f.Sandbox != nil:
			o := sandboxOutput(*f.Sandbox)
			out.Sandboxes = append(out.Sandboxes, o)
			fmt.Fprintf(&b, "forked %s\n", o.line())
		case f.Error != nil:
			out.Errors = append(out.Errors, f.Error.Message)
			fmt.Fprintf(&b, "a copy failed: %s\n", f.Error.Message)
		}
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (s *server) deleteSandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, DeleteOutput, error) {
	if err := in.validate(); err != nil {
		return nil, DeleteOutput{}, err
	}
	ctx, c, err := s.begin(ctx, req, "delete_sandbox", true)
	if err != nil {
		return nil, DeleteOutput{}, err
	}
	if err := c.Delete(ctx, in.SandboxID); err != nil {
		return nil, DeleteOutput{}, toolError("delete_sandbox", err)
	}
	return text("deleted sandbox %s", in.SandboxID), DeleteOutput{Deleted: in.SandboxID}, nil
}
