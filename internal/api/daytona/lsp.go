package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// LSP (createLspServer and its calls). A server is the image's python
// language server, pylsp, started through the agent with its stdin kept
// open and tagged with its language and project, so it lives in the
// sandbox's process table and the daemon keeps no state but a lock per
// server. A request attaches to the server's output (the agent's Connect),
// writes one framed JSON-RPC message to its stdin and reads framed messages
// until the answer with its id arrives; notifications it reads on the way
// (diagnostics) are dropped, and so is whatever the server writes while no
// request is attached. Notifications (didOpen, didClose) are only written.
//
// python runs pylsp; typescript and javascript run typescript-language-server
// (the Daytona image carries it, see images/daytona). An image without the
// language's server answers 501 when the server is started.

const (
	lspTagPrefix = "daytona-lsp:"
	// defaultLSPTimeout bounds one request to the language server when
	// Options names no bound. A server's first request waits for it to load
	// the project: typescript-language-server takes about 3 s of a
	// sandbox's one core on an idle machine and several times that on a
	// loaded one, so the bound is far above what a working server needs.
	defaultLSPTimeout = 2 * time.Minute
	// codeLSPNotInitialized is the code the SDK maps to
	// DaytonaLspServerNotInitializedError.
	codeLSPNotInitialized = "LSP_SERVER_NOT_INITIALIZED"
	// lspMethodNotFound is JSON-RPC's error code for an unknown method.
	lspMethodNotFound = -32601
)

// lspRequest is the union of the LSP request bodies and queries.
type lspRequest struct {
	LanguageID    string       `json:"languageId"`
	PathToProject string       `json:"pathToProject"`
	URI           string       `json:"uri"`
	Position      *LspPosition `json:"position"`
	Query         string       `json:"-"`
}

// LspPosition is a position in a document, both zero-based.
type LspPosition struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// LspRange is a range in a document.
type LspRange struct {
	Start LspPosition `json:"start"`
	End   LspPosition `json:"end"`
}

// LspLocation is a range in a document named by its URI.
type LspLocation struct {
	URI   string   `json:"uri"`
	Range LspRange `json:"range"`
}

// LspSymbol is Daytona's symbol model.
type LspSymbol struct {
	Name     string      `json:"name"`
	Kind     int         `json:"kind"`
	Location LspLocation `json:"location"`
}

// CompletionItem is Daytona's completion item.
type CompletionItem struct {
	Label         string          `json:"label"`
	Kind          int             `json:"kind,omitempty"`
	Detail        string          `json:"detail,omitempty"`
	Documentation json.RawMessage `json:"documentation,omitempty"`
	SortText      string          `json:"sortText,omitempty"`
	FilterText    string          `json:"filterText,omitempty"`
	InsertText    string          `json:"insertText,omitempty"`
}

// CompletionList is the answer of POST /lsp/completions.
type CompletionList struct {
	IsIncomplete bool             `json:"isIncomplete"`
	Items        []CompletionItem `json:"items"`
}

// lspServer is a resolved request: the sandbox and the server's tag.
type lspServer struct {
	c   *sandboxConn
	tag string
	req lspRequest
	// timeout bounds each request to the server.
	timeout time.Duration
}

// lspDecode reads the request (the body, or the query of a GET), checks the
// language and project and resolves the sandbox.
func (h *toolboxAPI) lspDecode(r *http.Request) (*lspServer, error) {
	var req lspRequest
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		req = lspRequest{LanguageID: q.Get("languageId"), PathToProject: q.Get("pathToProject"), URI: q.Get("uri"), Query: q.Get("query")}
	} else if err := api.DecodeJSON(r, &req, false); err != nil {
		return nil, err
	}
	if _, _, ok := languageServer(req.LanguageID); !ok {
		return nil, badRequest("languageId %q: use python, typescript or javascript", req.LanguageID)
	}
	if req.PathToProject == "" {
		return nil, badRequest("pathToProject is required")
	}
	c, err := h.conn(r)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(req.PathToProject))
	return &lspServer{c: c, tag: lspTagPrefix + req.LanguageID + ":" + hex.EncodeToString(sum[:8]), req: req, timeout: h.lspTimeout}, nil
}

// documentPath is the sandbox path of the request's file:// URI. A
// relative one ("file://project/main.py", as the SDK builds it from a
// relative path) is taken from the sandbox's working directory, as
// Daytona takes a relative project path, and the request's URI is made
// absolute, so the language server (which would read "project" as a host)
// and every later answer see one name for the file.
func (h *toolboxAPI) documentPath(ctx context.Context, s *lspServer) (string, error) {
	p, ok := strings.CutPrefix(s.req.URI, "file://")
	if !ok || p == "" {
		return "", badRequest("uri %q: a file:// URI is required", s.req.URI)
	}
	if !strings.HasPrefix(p, "/") {
		home, err := h.contextDir(ctx, s.c, "")
		if err != nil {
			return "", err
		}
		p = path.Join(home, p)
		s.req.URI = "file://" + p
	}
	return p, nil
}

// running checks that the server was started.
func (s *lspServer) running(ctx context.Context) error {
	p, err := s.c.byTag(ctx, s.tag)
	if err != nil {
		return err
	}
	if p == nil {
		return &problem{status: http.StatusBadRequest, message: "the LSP server for " + s.req.PathToProject + " is not started: call start first", code: codeLSPNotInitialized, source: sourceDaemon}
	}
	return nil
}

// lspFrame frames one JSON-RPC message.
func lspFrame(msg any) []byte {
	body, _ := json.Marshal(msg)
	return append([]byte("Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
}

// notify writes a notification to the server.
func (s *lspServer) notify(ctx context.Context, method string, params any) error {
	frame := lspFrame(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return s.c.input(ctx, s.tag, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: frame}})
}

// lspError is a JSON-RPC error answer.
type lspError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *lspError) Error() string { return fmt.Sprintf("language server: %s (%d)", e.Message, e.Code) }

// call sends a request and waits for its answer.
//
// The bound is a timer that cancels the attachment, never a deadline on
// it: the agent takes a Connect stream's deadline as the process's own (E2B
// clients set a command's timeout that way), so a deadline here would kill
// the language server that long after every request, answered or not.
func (s *lspServer) call(parent context.Context, method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	defer cancel()
	stopParent := context.AfterFunc(parent, cancel)
	defer stopParent()
	timedOut := make(chan struct{})
	timer := time.AfterFunc(s.timeout, func() { close(timedOut); cancel() })
	defer timer.Stop()
	stream, err := s.c.Process.Connect(ctx, fsRequest(&process.ConnectRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: s.tag}},
	}, s.c.Token))
	if err != nil {
		return nil, rpcError(err, false)
	}
	defer stream.Close()
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	var frames lspFrames
	// seen counts the messages read while waiting, for the timeout's
	// message: none means a server still busy (or stuck), some means one
	// that answers others but not this request.
	seen := 0
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			frame := lspFrame(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
			if err := s.c.input(ctx, s.tag, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: frame}}); err != nil {
				return nil, err
			}
		case ev.GetData() != nil:
			frames.add(ev.GetData().GetStdout())
			for {
				body, ok := frames.next()
				if !ok {
					break
				}
				seen++
				var m struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  *lspError       `json:"error"`
				}
				if json.Unmarshal(body, &m) != nil || string(m.ID) != strconv.Quote(id) {
					continue
				}
				if m.Error != nil {
					return nil, m.Error
				}
				return m.Result, nil
			}
		case ev.GetEnd() != nil:
			return nil, &problem{status: http.StatusBadRequest, code: codeLSPNotInitialized, source: sourceDaemon,
				message: fmt.Sprintf("the LSP server for %s ended (exit code %d): start it again", s.req.PathToProject, ev.GetEnd().GetExitCode())}
		}
	}
	if err := stream.Err(); err != nil {
		select {
		case <-timedOut:
			return nil, newProblem(http.StatusGatewayTimeout, "the language server did not answer %s within %s (%s)", method, s.timeout, lspWaitSeen(seen))
		default:
		}
		return nil, rpcError(err, false)
	}
	return nil, fmt.Errorf("the language server's stream ended")
}

// lspWaitSeen says what a server wrote during a wait that found no answer.
func lspWaitSeen(n int) string {
	switch n {
	case 0:
		return "it wrote nothing in that time"
	case 1:
		return "it wrote 1 other message in that time"
	}
	return fmt.Sprintf("it wrote %d other messages in that time", n)
}

// lspFrames reassembles framed JSON-RPC messages from a server's output.
//
// Each call attaches to the server afresh, and the agent drops what a
// process writes while nothing is attached, so the first bytes seen may be
// the rest of a message that began before: language servers commonly write
// a message's header and its body separately, and a notification such as
// publishDiagnostics can be between the two when the call attaches. Such a
// tail is discarded up to the next header. A header is recognised by its
// CR LF framing, which a body does not have (JSON strings escape CR and LF,
// and language servers write compact JSON), so a tail that quotes header
// text is not taken for one.
type lspFrames struct{ buf []byte }

func (f *lspFrames) add(p []byte) { f.buf = append(f.buf, p...) }

// next takes one whole message off the front, discarding anything that is
// not a message; false means more output is needed.
func (f *lspFrames) next() ([]byte, bool) {
	for {
		end := bytes.Index(f.buf, []byte("\r\n\r\n"))
		if end < 0 {
			return nil, false
		}
		// The header block starts at the last header name in its first
		// line; what comes before is the tail of an earlier message.
		first := f.buf[:end]
		if k := bytes.Index(first, []byte("\r\n")); k >= 0 {
			first = first[:k]
		}
		start := max(lastFold(first, "content-length:"), lastFold(first, "content-type:"))
		if start < 0 {
			f.buf = f.buf[end+4:]
			continue
		}
		n := -1
		for _, line := range strings.Split(string(f.buf[start:end]), "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
				if x, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && x >= 0 {
					n = x
				}
			}
		}
		if n < 0 {
			f.buf = f.buf[end+4:]
			continue
		}
		f.buf = f.buf[start:]
		body := end - start + 4
		if len(f.buf)-body < n {
			return nil, false
		}
		msg := f.buf[body : body+n]
		f.buf = f.buf[body+n:]
		return msg, true
	}
}

// lastFold is the index of the last case-insensitive occurrence of an
// ASCII lower-case needle in b, or -1.
func lastFold(b []byte, needle string) int {
	for i := len(b) - len(needle); i >= 0; i-- {
		if strings.EqualFold(string(b[i:i+len(needle)]), needle) {
			return i
		}
	}
	return -1
}

// lspHandler wraps an LSP endpoint: decode, resolve, lock the server, run.
func (h *toolboxAPI) lspHandler(op func(ctx context.Context, s *lspServer) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := h.lspDecode(r)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		unlock, err := h.interp.lock(r.Context(), s.c.id+"/"+s.tag)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		defer unlock()
		out, err := op(r.Context(), s)
		if le, ok := errors.AsType[*lspError](err); ok {
			err = &problem{status: http.StatusBadRequest, message: le.Error(), source: sourceDaemon}
		}
		if err != nil {
			WriteError(w, r, err)
			return
		}
		if out == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		api.WriteJSON(w, http.StatusOK, out)
	}
}

// languageServer is the command serving a language over stdio, and the
// package that provides it (for the error when the image lacks it).
// TypeScript's server serves JavaScript too.
func languageServer(languageID string) (cmd []string, pkg string, ok bool) {
	switch languageID {
	case "python":
		return []string{"pylsp"}, "python3-pylsp", true
	case "typescript", "javascript":
		return []string{"typescript-language-server", "--stdio"}, "typescript-language-server (npm)", true
	}
	return nil, "", false
}

// lspStart starts the project's server and initialises it; a server that
// runs already is left as it is.
func (h *toolboxAPI) lspStart(ctx context.Context, s *lspServer) (any, error) {
	p, err := s.c.byTag(ctx, s.tag)
	if err != nil || p != nil {
		return nil, err
	}
	dir, err := h.contextDir(ctx, s.c, s.req.PathToProject)
	if err != nil {
		return nil, err
	}
	cmd, pkg, _ := languageServer(s.req.LanguageID)
	res, err := h.runProc(ctx, s.c.Agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `command -v "$0"`, cmd[0]}}, fsToolTimeout)
	if err != nil {
		return nil, err
	}
	if res.exitCode != 0 {
		return nil, notImplemented(fmt.Sprintf("LSP for %s is not available in this sandbox: its image has no %s (%s)", s.req.LanguageID, cmd[0], pkg))
	}
	stdin := true
	if _, err := s.c.startDetached(ctx, &process.StartRequest{
		Process: &process.ProcessConfig{Cmd: cmd[0], Args: cmd[1:], Cwd: &dir},
		Tag:     &s.tag,
		Stdin:   &stdin,
	}); err != nil {
		return nil, err
	}
	_, err = s.call(ctx, "initialize", map[string]any{
		"processId": nil,
		"rootUri":   "file://" + dir,
		"rootPath":  dir,
		"capabilities": map[string]any{
			"textDocument": map[string]any{
				"completion":     map[string]any{"completionItem": map[string]any{"snippetSupport": false}},
				"documentSymbol": map[string]any{"hierarchicalDocumentSymbolSupport": false},
			},
			"workspace": map[string]any{"symbol": map[string]any{}},
		},
	})
	if err == nil {
		err = s.notify(ctx, "initialized", map[string]any{})
	}
	if err != nil {
		// A server that could not be initialised is not left behind.
		_ = s.c.kill(context.WithoutCancel(ctx), s.tag)
		return nil, err
	}
	return nil, nil
}

func (h *toolboxAPI) lspStop(ctx context.Context, s *lspServer) (any, error) {
	p, err := s.c.byTag(ctx, s.tag)
	if err != nil || p == nil {
		return nil, err
	}
	// kill answers once the server is gone, so the next call sees it
	// stopped rather than a process about to end.
	return nil, s.c.kill(ctx, s.tag)
}

func (h *toolboxAPI) lspDidOpen(ctx context.Context, s *lspServer) (any, error) {
	path, err := h.documentPath(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := s.running(ctx); err != nil {
		return nil, err
	}
	if ok, err := s.c.exists(ctx, path); err != nil {
		return nil, err
	} else if !ok {
		return nil, &problem{status: http.StatusNotFound, message: "file " + path + " not found", code: codeFileNotFound, source: sourceDaemon}
	}
	text, err := h.readFrom(ctx, s.c, path, 0)
	if err != nil {
		return nil, err
	}
	return nil, s.notify(ctx, "textDocument/didOpen", map[string]any{
		"textDocument": map[string]any{"uri": s.req.URI, "languageId": s.req.LanguageID, "version": 1, "text": string(text)},
	})
}

func (h *toolboxAPI) lspDidClose(ctx context.Context, s *lspServer) (any, error) {
	if _, err := h.documentPath(ctx, s); err != nil {
		return nil, err
	}
	if err := s.running(ctx); err != nil {
		return nil, err
	}
	return nil, s.notify(ctx, "textDocument/didClose", map[string]any{"textDocument": map[string]any{"uri": s.req.URI}})
}

// symbols turns a symbol answer into Daytona's symbols: SymbolInformation
// as is, DocumentSymbol (which has no location) flattened with the
// document's URI.
func symbols(raw json.RawMessage, uri string) []LspSymbol {
	var items []struct {
		Name     string       `json:"name"`
		Kind     int          `json:"kind"`
		Location *LspLocation `json:"location"`
		Range    *LspRange    `json:"range"`
		Children json.RawMessage
	}
	out := []LspSymbol{}
	if json.Unmarshal(raw, &items) != nil {
		return out
	}
	for _, it := range items {
		switch {
		case it.Location != nil:
			out = append(out, LspSymbol{Name: it.Name, Kind: it.Kind, Location: *it.Location})
		case it.Range != nil:
			out = append(out, LspSymbol{Name: it.Name, Kind: it.Kind, Location: LspLocation{URI: uri, Range: *it.Range}})
			if len(it.Children) > 0 {
				out = append(out, symbols(it.Children, uri)...)
			}
		}
	}
	return out
}

func (h *toolboxAPI) lspDocumentSymbols(ctx context.Context, s *lspServer) (any, error) {
	if _, err := h.documentPath(ctx, s); err != nil {
		return nil, err
	}
	if err := s.running(ctx); err != nil {
		return nil, err
	}
	raw, err := s.call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": s.req.URI}})
	if err != nil {
		return nil, err
	}
	return symbols(raw, s.req.URI), nil
}

func (h *toolboxAPI) lspWorkspaceSymbols(ctx context.Context, s *lspServer) (any, error) {
	if err := s.running(ctx); err != nil {
		return nil, err
	}
	raw, err := s.call(ctx, "workspace/symbol", map[string]any{"query": s.req.Query})
	le, ok := errors.AsType[*lspError](err)
	if err != nil && (!ok || le.Code != lspMethodNotFound) {
		return nil, err
	}
	out := []LspSymbol{}
	if err == nil {
		out = symbols(raw, "")
	}
	if len(out) > 0 || s.req.Query == "" {
		return out, nil
	}
	// pylsp answers workspace/symbol with nothing (or not at all), where
	// Daytona's finds a project's classes and functions: the project's
	// files that name the query are asked for their document symbols.
	return h.projectSymbols(ctx, s)
}

// maxSymbolFiles bounds how many files projectSymbols asks the server
// about, so a query common in a large project stays a bounded request.
const maxSymbolFiles = 50

// sourceGlobs are the file names a language's sources have.
func sourceGlobs(languageID string) []string {
	if languageID == "python" {
		return []string{"*.py", "*.pyi"}
	}
	return []string{"*.ts", "*.tsx", "*.js", "*.jsx", "*.mjs", "*.cjs"}
}

// projectSymbols is workspace symbols made of document symbols: the
// symbols whose names hold the query (case aside, as language servers
// match) in the project's source files that contain it.
func (h *toolboxAPI) projectSymbols(ctx context.Context, s *lspServer) ([]LspSymbol, error) {
	dir, err := h.contextDir(ctx, s.c, s.req.PathToProject)
	if err != nil {
		return nil, err
	}
	args := []string{"-c", `q=$1; d=$2; shift 2; grep -rlIiF "$@" -e "$q" -- "$d" 2>/dev/null | head -n ` + strconv.Itoa(maxSymbolFiles), "sh", s.req.Query, dir}
	for _, g := range sourceGlobs(s.req.LanguageID) {
		args = append(args, "--include="+g)
	}
	res, err := h.runProc(ctx, s.c.Agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: args}, fsToolTimeout)
	if err != nil {
		return nil, err
	}
	query := strings.ToLower(s.req.Query)
	out := []LspSymbol{}
	for _, file := range strings.Split(strings.TrimSpace(string(res.stdout)), "\n") {
		if file == "" {
			continue
		}
		uri := "file://" + file
		raw, err := s.call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": uri}})
		if err != nil {
			return nil, err
		}
		for _, sym := range symbols(raw, uri) {
			if strings.Contains(strings.ToLower(sym.Name), query) {
				out = append(out, sym)
			}
		}
	}
	return out, nil
}

func (h *toolboxAPI) lspCompletions(ctx context.Context, s *lspServer) (any, error) {
	if _, err := h.documentPath(ctx, s); err != nil {
		return nil, err
	}
	if s.req.Position == nil || s.req.Position.Line < 0 || s.req.Position.Character < 0 {
		return nil, badRequest("position {line, character} is required, both from 0")
	}
	if err := s.running(ctx); err != nil {
		return nil, err
	}
	raw, err := s.call(ctx, "textDocument/completion", map[string]any{
		"textDocument": map[string]any{"uri": s.req.URI},
		"position":     s.req.Position,
	})
	if err != nil {
		return nil, err
	}
	out := CompletionList{Items: []CompletionItem{}}
	// The answer is a CompletionList or a bare array of items.
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		_ = json.Unmarshal(raw, &out.Items)
	} else {
		_ = json.Unmarshal(raw, &out)
	}
	if out.Items == nil {
		out.Items = []CompletionItem{}
	}
	return out, nil
}
