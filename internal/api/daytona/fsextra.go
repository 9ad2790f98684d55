package daytona

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// The file toolbox beyond transfers: content search, name search, replace
// and permissions. Each runs the sandbox's own tools (grep, find, chmod,
// chown) as a process with an argument vector, never through a shell, so no
// user input is ever parsed as shell syntax.

// Limits of the file toolbox.
const (
	// fsToolTimeout bounds one search or permission change.
	fsToolTimeout = 2 * time.Minute
	// maxReplaceFiles bounds one replace request.
	maxReplaceFiles = 1000
	// maxReplaceSize bounds a file a replace reads into memory.
	maxReplaceSize = 64 << 20
)

// Match is one line found by findFiles.
type Match struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Content string `json:"content"`
}

// findScript lists matching lines file by file: a marker line with the file
// name, then grep -n's "line:content" lines. The marker starts with a byte
// no text line starts with, so names with ':' parse unambiguously (busybox
// grep has no -Z).
const findScript = `grep -rlsF -e "$1" -- "$2" | while IFS= read -r f; do printf '\001%s\n' "$f"; grep -nsF -e "$1" -- "$f"; done`

// findFiles answers GET /files/find?path=&pattern=: the lines of files under
// path that contain pattern, literally.
func (h *toolboxAPI) findFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path, pattern := q.Get("path"), q.Get("pattern")
	if path == "" || pattern == "" {
		WriteError(w, r, badRequest("query parameters path and pattern are required"))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	res, err := h.runProc(r.Context(), agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", findScript, "find", pattern, path}}, fsToolTimeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := []Match{}
	file := ""
	for _, line := range strings.Split(string(res.stdout), "\n") {
		if strings.HasPrefix(line, "\x01") {
			file = line[1:]
			continue
		}
		num, content, ok := strings.Cut(line, ":")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || file == "" {
			continue
		}
		out = append(out, Match{File: file, Line: n, Content: content})
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// SearchFilesResponse is the answer of GET /files/search.
type SearchFilesResponse struct {
	Files []string `json:"files"`
}

// searchFiles answers GET /files/search?path=&pattern=: the files under path
// whose names match the glob pattern.
func (h *toolboxAPI) searchFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path, pattern := q.Get("path"), q.Get("pattern")
	if path == "" || pattern == "" {
		WriteError(w, r, badRequest("query parameters path and pattern are required"))
		return
	}
	if strings.HasPrefix(path, "-") {
		// find takes a leading '-' as an option and has no "--".
		path = "./" + path
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	res, err := h.runProc(r.Context(), agent, &process.ProcessConfig{Cmd: "find", Args: []string{path, "-name", pattern}}, fsToolTimeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if res.exitCode != 0 && len(res.stdout) == 0 {
		WriteError(w, r, &problem{status: http.StatusNotFound, message: strings.TrimSpace(string(res.stderr)), code: codeFileNotFound, source: sourceDaemon})
		return
	}
	out := SearchFilesResponse{Files: []string{}}
	for _, f := range strings.Split(string(res.stdout), "\n") {
		if f != "" {
			out.Files = append(out.Files, f)
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// ReplaceRequest is the body of POST /files/replace.
type ReplaceRequest struct {
	Files    []string `json:"files"`
	Pattern  string   `json:"pattern"`
	NewValue *string  `json:"newValue"`
}

// ReplaceResult is the outcome for one file.
type ReplaceResult struct {
	File    string `json:"file"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
}

// replaceInFiles replaces every literal occurrence of pattern in each file,
// reporting per file, as Daytona does.
func (h *toolboxAPI) replaceInFiles(w http.ResponseWriter, r *http.Request) {
	var req ReplaceRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	switch {
	case len(req.Files) == 0:
		WriteError(w, r, badRequest("files is required"))
		return
	case len(req.Files) > maxReplaceFiles:
		WriteError(w, r, badRequest("at most %d files per replace", maxReplaceFiles))
		return
	case req.Pattern == "":
		WriteError(w, r, badRequest("pattern is required"))
		return
	case req.NewValue == nil:
		WriteError(w, r, badRequest("newValue is required"))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := make([]ReplaceResult, 0, len(req.Files))
	for _, f := range req.Files {
		res := ReplaceResult{File: f, Success: true}
		if err := h.replaceInFile(r.Context(), agent.Addr, agent.Token, f, req.Pattern, *req.NewValue); err != nil {
			res.Success, res.Error = false, err.Error()
		}
		out = append(out, res)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// replaceInFile reads a file through the agent, replaces, and writes it
// back only if something changed.
func (h *toolboxAPI) replaceInFile(ctx context.Context, addr, token, path, pattern, value string) error {
	if path == "" {
		return fmt.Errorf("empty path")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set(accessTokenHeader, token)
	resp, err := h.svc.AgentHTTP().Do(req)
	if err != nil {
		return fmt.Errorf("sandbox agent unreachable: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agentHTTPError(resp, path)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReplaceSize+1))
	if err != nil {
		return err
	}
	if len(body) > maxReplaceSize {
		return fmt.Errorf("%s is larger than %d bytes", path, maxReplaceSize)
	}
	changed := bytes.ReplaceAll(body, []byte(pattern), []byte(value))
	if bytes.Equal(changed, body) {
		return nil
	}
	return h.writeFile(ctx, addr, token, path, bytes.NewReader(changed))
}

var (
	modeRE  = regexp.MustCompile(`^[0-7]{3,4}$`)
	ownerRE = regexp.MustCompile(`^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})$`)
)

// setFilePermissions answers POST /files/permissions?path=&mode=&owner=&group=.
func (h *toolboxAPI) setFilePermissions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path, mode, owner, group := q.Get("path"), q.Get("mode"), q.Get("owner"), q.Get("group")
	switch {
	case path == "":
		WriteError(w, r, badRequest("query parameter path is required"))
		return
	case mode == "" && owner == "" && group == "":
		WriteError(w, r, badRequest("give at least one of mode, owner and group"))
		return
	case mode != "" && !modeRE.MatchString(mode):
		WriteError(w, r, badRequest("mode must be octal, like 755 or 0644"))
		return
	case owner != "" && !ownerRE.MatchString(owner), group != "" && !ownerRE.MatchString(group):
		WriteError(w, r, badRequest("owner and group must be user or group names or numeric ids"))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	var cmds [][]string
	if mode != "" {
		cmds = append(cmds, []string{"chmod", mode, "--", path})
	}
	switch {
	case owner != "" && group != "":
		cmds = append(cmds, []string{"chown", owner + ":" + group, "--", path})
	case owner != "":
		cmds = append(cmds, []string{"chown", owner, "--", path})
	case group != "":
		cmds = append(cmds, []string{"chgrp", group, "--", path})
	}
	for _, c := range cmds {
		res, err := h.runProc(r.Context(), agent, &process.ProcessConfig{Cmd: c[0], Args: c[1:]}, fsToolTimeout)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		if res.exitCode != 0 {
			msg := strings.TrimSpace(string(res.stderr))
			p := &problem{status: http.StatusBadRequest, message: msg, code: codeInvalidFilePath, source: sourceDaemon}
			switch {
			case strings.Contains(msg, "No such file"):
				p.status, p.code = http.StatusNotFound, codeFileNotFound
			case strings.Contains(msg, "not permitted"), strings.Contains(msg, "denied"):
				p.status, p.code = http.StatusForbidden, codeFileAccessDenied
			}
			WriteError(w, r, p)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
