package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/service"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// The toolbox: Daytona's in-sandbox API, translated call by call onto the
// agent's protocol (Connect RPC process.Process and filesystem.Filesystem,
// and plain-HTTP /files).

// accessTokenHeader carries a sandbox's agent token.
const accessTokenHeader = agentapi.AccessTokenHeader

// Limits of the toolbox.
const (
	// maxExecOutput bounds what one executeCommand buffers; output beyond it
	// is dropped, since the answer is a single JSON string.
	maxExecOutput = 16 << 20
	// maxBulkPaths bounds one bulk download.
	maxBulkPaths = 1000
	// maxPathField bounds a files[i].path form value.
	maxPathField = 4096
	// maxAgentError bounds an agent error body read for its message.
	maxAgentError = 64 << 10
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// agent resolves the {id} path value (an id or a name) to the service's
// connection to a running sandbox's agent.
func (h *core) agent(r *http.Request) (agentapi.Agent, error) {
	_, a, err := h.agentOf(r)
	return a, err
}

// agentOf is agent that also returns the sandbox's id.
func (h *core) agentOf(r *http.Request) (string, agentapi.Agent, error) {
	x := r.PathValue("id")
	sb, err := h.svc.GetSandboxByIDOrName(r.Context(), x)
	if err != nil {
		return "", agentapi.Agent{}, lookupError(err, x)
	}
	a, err := h.svc.Agent(r.Context(), sb.ID)
	if err != nil {
		return "", agentapi.Agent{}, lookupError(err, x)
	}
	// Every toolbox call is activity: it defers the sandbox's auto-stop.
	h.svc.Touch(r.Context(), sb.ID, false)
	return sb.ID, a, nil
}

// rpcError maps an agent RPC failure to a Daytona error. File operations get
// the toolbox codes the SDK turns into precise error classes.
func rpcError(err error, fileOp bool) error {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return fmt.Errorf("%w: agent: %v", service.ErrRuntime, err)
	}
	p := &problem{message: cerr.Message()}
	if fileOp {
		p.source = sourceDaemon
	}
	switch cerr.Code() {
	case connect.CodeNotFound:
		if !fileOp {
			// For a command, "not found" is about its input (a missing cwd
			// or shell), not the sandbox: a 404 would read as the latter.
			p.status = http.StatusBadRequest
			break
		}
		p.status = http.StatusNotFound
		p.code = codeFileNotFound
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		p.status = http.StatusBadRequest
		if fileOp {
			p.code = codeInvalidFilePath
		}
	case connect.CodePermissionDenied:
		p.status = http.StatusForbidden
		if fileOp {
			p.code = codeFileAccessDenied
		}
	case connect.CodeAlreadyExists:
		p.status = http.StatusConflict
	case connect.CodeDeadlineExceeded:
		p.status = http.StatusRequestTimeout
	case connect.CodeResourceExhausted:
		p.status = http.StatusInsufficientStorage
	default:
		return fmt.Errorf("%w: agent: %v", service.ErrRuntime, err)
	}
	return p
}

// ExecuteRequest is the body of POST /process/execute.
type ExecuteRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd"`
	Envs    map[string]string `json:"envs"`
	// Timeout is in seconds; 0 or absent means no limit.
	Timeout *float64 `json:"timeout"`
}

// ExecuteResponse is the answer: stdout and stderr combined in the order the
// command wrote them, and the exit code (non-zero is still a 200).
type ExecuteResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

func (h *toolboxAPI) execute(w http.ResponseWriter, r *http.Request) {
	var req ExecuteRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		WriteError(w, r, badRequest("command is required"))
		return
	}
	timeout, err := runLimits(req.Timeout, req.Envs)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	res, err := h.run(r.Context(), agent, req, timeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, res)
}

// runLimits validates the timeout (seconds; nil or 0 = none) and the
// environment of a command or code run.
func runLimits(seconds *float64, envs map[string]string) (time.Duration, error) {
	var timeout time.Duration
	if seconds != nil {
		if *seconds < 0 {
			return 0, badRequest("timeout must not be negative")
		}
		timeout = time.Duration(*seconds * float64(time.Second))
	}
	for k := range envs {
		if !envName.MatchString(k) {
			return 0, badRequest("invalid environment variable name %q", k)
		}
	}
	return timeout, nil
}

// run executes a command through the agent's Start stream. The command goes
// through /bin/sh -c, so that shell syntax (pipes, &&, $VAR, redirections)
// works as users of executeCommand expect. The script first points its
// stderr at its stdout: the agent reads the two from separate pipes, and
// only one pipe keeps their lines in the order the command wrote them, which
// is what Daytona's combined result promises. A deadline travels to the
// agent as the stream's Connect timeout, and the agent kills the process
// when it fires.
func (h *toolboxAPI) run(ctx context.Context, agent agentapi.Agent, req ExecuteRequest, timeout time.Duration) (ExecuteResponse, error) {
	cfg := &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "exec 2>&1\n" + req.Command}, Envs: req.Envs}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	res, err := h.runProc(ctx, agent, cfg, timeout)
	if err != nil {
		return ExecuteResponse{}, err
	}
	return ExecuteResponse{ExitCode: res.exitCode, Result: string(res.stdout)}, nil
}

// procResult is what a finished process left: its output, each bounded by
// maxExecOutput, and its exit code.
type procResult struct {
	stdout, stderr []byte
	exitCode       int
}

// runProc runs one process through the agent's Start stream and waits for
// it. A deadline travels to the agent as the stream's Connect timeout, and
// the agent kills the process when it fires; that is reported with
// Daytona's sentence for it.
func (h *core) runProc(ctx context.Context, agent agentapi.Agent, cfg *process.ProcessConfig, timeout time.Duration) (procResult, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	creq := connect.NewRequest(&process.StartRequest{Process: cfg})
	creq.Header().Set(accessTokenHeader, agent.Token)
	timedOut := func(err error) error {
		if timeout > 0 && (errors.Is(ctx.Err(), context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded) {
			return &problem{
				status:  http.StatusRequestTimeout,
				message: "command execution timeout",
				code:    codeExecTimeout,
				source:  sourceDaemon,
			}
		}
		return nil
	}
	var res procResult
	stream, err := agent.Process.Start(ctx, creq)
	if err != nil {
		if p := timedOut(err); p != nil {
			return res, p
		}
		return res, rpcError(err, false)
	}
	defer stream.Close()
	ended := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			if chunk := d.GetStdout(); len(res.stdout)+len(chunk) <= maxExecOutput {
				res.stdout = append(res.stdout, chunk...)
			}
			if chunk := d.GetPty(); len(res.stdout)+len(chunk) <= maxExecOutput {
				res.stdout = append(res.stdout, chunk...)
			}
			if chunk := d.GetStderr(); len(res.stderr)+len(chunk) <= maxExecOutput {
				res.stderr = append(res.stderr, chunk...)
			}
		}
		if e := ev.GetEnd(); e != nil {
			res.exitCode = int(e.GetExitCode())
			ended = true
		}
	}
	if err := stream.Err(); err != nil {
		if p := timedOut(err); p != nil {
			return res, p
		}
		return res, rpcError(err, false)
	}
	if !ended {
		if p := timedOut(nil); p != nil {
			return res, p
		}
		return res, fmt.Errorf("%w: the command's stream closed without an end event", service.ErrRuntime)
	}
	return res, nil
}

// filesField matches the form fields of a bulk upload: files[i].path and
// files[i].file.
var filesField = regexp.MustCompile(`^files\[(\d{1,6})\]\.(path|file)$`)

// rawFilename returns a part's filename exactly as sent. Part.FileName
// reduces it to its base name, but the SDK puts the destination path there.
func rawFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

func (h *toolboxAPI) bulkUpload(w http.ResponseWriter, r *http.Request) {
	// The caller is authenticated and the upload streams to the agent for
	// as long as it takes; only the body-size bound applies.
	httpguard.LiftReadDeadline(w)
	mr, err := r.MultipartReader()
	if err != nil {
		WriteError(w, r, badRequest("bulk-upload takes a multipart/form-data body: %v", err))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	// The SDK sends files[i].path before files[i].file, so each file can be
	// streamed to the agent as it arrives, without buffering it here.
	paths := map[string]string{}
	uploaded := map[string]bool{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			WriteError(w, r, badRequest("malformed multipart body: %v", err))
			return
		}
		m := filesField.FindStringSubmatch(part.FormName())
		if m == nil {
			_, _ = io.Copy(io.Discard, part)
			continue
		}
		idx := m[1]
		switch m[2] {
		case "path":
			b, err := io.ReadAll(io.LimitReader(part, maxPathField+1))
			if err != nil {
				WriteError(w, r, badRequest("malformed multipart body: %v", err))
				return
			}
			if len(b) > maxPathField {
				WriteError(w, r, badRequest("files[%s].path is longer than %d bytes", idx, maxPathField))
				return
			}
			paths[idx] = string(b)
		case "file":
			dest := paths[idx]
			if dest == "" {
				dest = rawFilename(part)
			}
			if dest == "" {
				WriteError(w, r, badRequest("files[%s].file has no destination: send files[%s].path first", idx, idx))
				return
			}
			if err := h.writeFile(r.Context(), agent.Addr, agent.Token, dest, part); err != nil {
				WriteError(w, r, err)
				return
			}
			uploaded[idx] = true
		}
	}
	for idx := range paths {
		if !uploaded[idx] {
			WriteError(w, r, badRequest("files[%s].path was sent without files[%s].file", idx, idx))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// writeFile streams one file to the agent's POST /files.
func (h *core) writeFile(ctx context.Context, addr, token, dest string, body io.Reader) error {
	u := "http://" + addr + "/files?path=" + url.QueryEscape(dest)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(accessTokenHeader, token)
	resp, err := h.svc.AgentHTTP().Do(req)
	if err != nil {
		return fmt.Errorf("%w: upload %s: %v", service.ErrRuntime, dest, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAgentError))
		return nil
	}
	return agentHTTPError(resp, dest)
}

// agentHTTPError turns a non-2xx answer of the agent's /files into a
// Daytona error with the toolbox's file codes.
func agentHTTPError(resp *http.Response, path string) *problem {
	var body struct {
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAgentError))
	if json.Unmarshal(b, &body) != nil || body.Message == "" {
		body.Message = strings.TrimSpace(string(b))
	}
	if body.Message == "" {
		body.Message = http.StatusText(resp.StatusCode)
	}
	p := &problem{status: resp.StatusCode, message: fmt.Sprintf("%s: %s", path, body.Message), source: sourceDaemon}
	switch resp.StatusCode {
	case http.StatusNotFound:
		p.code = codeFileNotFound
	case http.StatusForbidden:
		p.code = codeFileAccessDenied
	case http.StatusBadRequest:
		p.code = codeInvalidFilePath
	case http.StatusUnauthorized:
		// The daemon holds the sandbox's token; a refusal is an upstream
		// fault, not the caller's.
		p.status = http.StatusBadGateway
		p.code = codeFileReadFailed
	default:
		p.code = codeFileReadFailed
	}
	return p
}

// DownloadRequest is the body of POST /files/bulk-download.
type DownloadRequest struct {
	Paths []string `json:"paths"`
}

// downloadError is the JSON of an error part of a bulk download.
type downloadError struct {
	Message    string `json:"message"`
	StatusCode int    `json:"statusCode"`
	Code       string `json:"code"`
	Source     string `json:"source,omitempty"`
}

func (h *toolboxAPI) bulkDownload(w http.ResponseWriter, r *http.Request) {
	var req DownloadRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if len(req.Paths) == 0 {
		WriteError(w, r, badRequest("paths is required"))
		return
	}
	if len(req.Paths) > maxBulkPaths {
		WriteError(w, r, badRequest("at most %d paths per bulk download", maxBulkPaths))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	// The parts are a sandbox's files: a browser saves them, never shows them.
	w.Header().Set("Content-Disposition", "attachment")
	w.WriteHeader(http.StatusOK)
	for _, p := range req.Paths {
		if err := h.downloadPart(r.Context(), mw, agent.Addr, agent.Token, p); err != nil {
			// A file is half-written into the response: there is no way to
			// mark it failed, so the response is cut short, which the client
			// sees as a broken multipart body rather than a truncated file.
			h.log.Warn("daytona bulk download aborted", "path", p, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
	_ = mw.Close()
}

// downloadPart writes one path's part: the file, or an error part. It
// returns an error only when the response itself can no longer be trusted.
func (h *toolboxAPI) downloadPart(ctx context.Context, mw *multipart.Writer, addr, token, path string) error {
	fail := func(p *problem) error {
		part, err := mw.CreatePart(partHeader("error", path, "application/json"))
		if err != nil {
			return err
		}
		return json.NewEncoder(part).Encode(downloadError{Message: p.message, StatusCode: p.status, Code: p.code, Source: p.source})
	}
	if path == "" {
		return fail(&problem{status: http.StatusBadRequest, message: "empty path", code: codeInvalidFilePath, source: sourceDaemon})
	}
	u := "http://" + addr + "/files?path=" + url.QueryEscape(path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set(accessTokenHeader, token)
	resp, err := h.svc.AgentHTTP().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(&problem{status: http.StatusBadGateway, message: fmt.Sprintf("%s: sandbox agent unreachable: %v", path, err), code: codeFileReadFailed, source: sourceDaemon})
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(agentHTTPError(resp, path))
	}
	hdr := partHeader("file", path, "application/octet-stream")
	if resp.ContentLength >= 0 {
		// The SDK reads it to report download progress.
		hdr.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	part, err := mw.CreatePart(hdr)
	if err != nil {
		return err
	}
	n, err := io.Copy(part, resp.Body)
	if err != nil {
		return err
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("agent sent %d of %d bytes", n, resp.ContentLength)
	}
	return nil
}

// partHeader is the header of a multipart part named field carrying the
// file filename. The SDK matches parts to requested paths by the filename,
// which must therefore arrive exactly: printable ASCII goes in a quoted
// string, anything else as an RFC 5987 UTF-8 extended value, which the SDK's
// parser (busboy) decodes without guessing a character set.
func partHeader(field, filename, contentType string) textproto.MIMEHeader {
	hdr := make(textproto.MIMEHeader)
	hdr.Set("Content-Disposition", contentDisposition(field, filename))
	hdr.Set("Content-Type", contentType)
	return hdr
}

func contentDisposition(field, filename string) string {
	plain := true
	for i := 0; i < len(filename); i++ {
		if c := filename[i]; c < 0x20 || c > 0x7E {
			plain = false
			break
		}
	}
	if plain {
		q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(filename)
		return fmt.Sprintf(`form-data; name="%s"; filename="%s"`, field, q)
	}
	return fmt.Sprintf(`form-data; name="%s"; filename*=UTF-8''%s`, field, rfc5987Escape(filename))
}

// rfc5987Escape percent-encodes every byte that is not an RFC 5987
// attr-char.
func rfc5987Escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// FileInfo is Daytona's file description.
type FileInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path,omitempty"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
}

// toFileInfo translates an agent entry. Mode is the symbolic form
// ("-rw-r--r--") and permissions the octal one ("0644"), as Daytona's daemon
// reports them.
func toFileInfo(e *fspb.EntryInfo) FileInfo {
	mod := ""
	if t := e.GetModifiedTime(); t != nil {
		mod = t.AsTime().UTC().Format(time.RFC3339Nano)
	}
	mode := e.GetPermissions()
	if mode == "" {
		mode = os.FileMode(e.GetMode()).String()
	}
	return FileInfo{
		Name:        e.GetName(),
		Path:        e.GetPath(),
		IsDir:       e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY,
		Size:        e.GetSize(),
		Mode:        mode,
		Permissions: fmt.Sprintf("%04o", e.GetMode()&0o7777),
		Owner:       e.GetOwner(),
		Group:       e.GetGroup(),
		ModTime:     mod,
		ModifiedAt:  mod,
	}
}

// fsClient returns a filesystem client for the request's sandbox.
func (h *toolboxAPI) fsClient(r *http.Request) (filesystemconnect.FilesystemClient, string, error) {
	agent, err := h.agent(r)
	if err != nil {
		return nil, "", err
	}
	return agent.Filesystem, agent.Token, nil
}

// pathAndClient reads the required ?path= and connects to the sandbox's
// filesystem service; on failure it has already answered the request.
func (h *toolboxAPI) pathAndClient(w http.ResponseWriter, r *http.Request) (string, filesystemconnect.FilesystemClient, string, bool) {
	path := r.URL.Query().Get("path")
	if path == "" {
		WriteError(w, r, badRequest("query parameter path is required"))
		return "", nil, "", false
	}
	client, token, err := h.fsClient(r)
	if err != nil {
		WriteError(w, r, err)
		return "", nil, "", false
	}
	return path, client, token, true
}

// fsRequest wraps a message with the agent token.
func fsRequest[T any](msg *T, token string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(accessTokenHeader, token)
	return req
}

func (h *toolboxAPI) listFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	depth := 1
	if d := q.Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > 64 {
			WriteError(w, r, badRequest("depth must be an integer from 1 to 64"))
			return
		}
		depth = n
	}
	client, token, err := h.fsClient(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	resp, err := client.ListDir(r.Context(), fsRequest(&fspb.ListDirRequest{Path: q.Get("path"), Depth: uint32(depth)}, token))
	if err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	out := make([]FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, toFileInfo(e))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *toolboxAPI) fileInfo(w http.ResponseWriter, r *http.Request) {
	path, client, token, ok := h.pathAndClient(w, r)
	if !ok {
		return
	}
	resp, err := client.Stat(r.Context(), fsRequest(&fspb.StatRequest{Path: path}, token))
	if err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	api.WriteJSON(w, http.StatusOK, toFileInfo(resp.Msg.GetEntry()))
}

func (h *toolboxAPI) createFolder(w http.ResponseWriter, r *http.Request) {
	path, client, token, ok := h.pathAndClient(w, r)
	if !ok {
		return
	}
	_, err := client.MakeDir(r.Context(), fsRequest(&fspb.MakeDirRequest{Path: path}, token))
	if err != nil && connect.CodeOf(err) == connect.CodeAlreadyExists {
		// Daytona creates folders like mkdir -p: an existing directory is
		// success. An existing file is not.
		st, serr := client.Stat(r.Context(), fsRequest(&fspb.StatRequest{Path: path}, token))
		if serr == nil && st.Msg.GetEntry().GetType() == fspb.FileType_FILE_TYPE_DIRECTORY {
			err = nil
		}
	}
	if err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *toolboxAPI) deleteFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path, client, token, ok := h.pathAndClient(w, r)
	if !ok {
		return
	}
	// The agent removes whole trees; Daytona asks for recursive=true before
	// it deletes a directory, so that is checked first.
	st, err := client.Stat(r.Context(), fsRequest(&fspb.StatRequest{Path: path}, token))
	if err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	if st.Msg.GetEntry().GetType() == fspb.FileType_FILE_TYPE_DIRECTORY && q.Get("recursive") != "true" {
		WriteError(w, r, &problem{status: http.StatusBadRequest, message: path + " is a directory: pass recursive=true to delete it", code: codeInvalidFilePath, source: sourceDaemon})
		return
	}
	if _, err := client.Remove(r.Context(), fsRequest(&fspb.RemoveRequest{Path: path}, token)); err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *toolboxAPI) moveFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	src, dst := q.Get("source"), q.Get("destination")
	if src == "" || dst == "" {
		WriteError(w, r, badRequest("query parameters source and destination are required"))
		return
	}
	client, token, err := h.fsClient(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if _, err := client.Move(r.Context(), fsRequest(&fspb.MoveRequest{Source: src, Destination: dst}, token)); err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// homeDir answers getUserHomeDir and getWorkDir. Both are the agent's home
// directory: it is where relative paths and commands without a cwd start,
// which is what Daytona's working directory means.
func (h *toolboxAPI) homeDir(w http.ResponseWriter, r *http.Request) {
	client, token, err := h.fsClient(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	resp, err := client.Stat(r.Context(), fsRequest(&fspb.StatRequest{Path: "~"}, token))
	if err != nil {
		WriteError(w, r, rpcError(err, true))
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"dir": resp.Msg.GetEntry().GetPath()})
}
