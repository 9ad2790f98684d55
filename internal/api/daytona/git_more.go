package daytona

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// The rest of sandbox.git: reset, restore, remotes and config, each one or
// two runs of the sandbox's git with an argument vector, like the calls in
// git.go. Requests are checked before git runs, so bad input changes
// nothing.

// gitDone runs one git command and answers 200 when it succeeds.
func (h *toolboxAPI) gitDone(w http.ResponseWriter, r *http.Request, c *sandboxConn, call gitCall) error {
	if _, err := h.git(r.Context(), c, call); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

var resetModes = []string{"soft", "mixed", "hard", "merge", "keep"}

func (h *toolboxAPI) gitReset(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Mode != "" && !slices.Contains(resetModes, req.Mode) {
		return badRequest("mode %q: use one of %s", req.Mode, strings.Join(resetModes, ", "))
	}
	args := []string{"reset"}
	if len(req.Files) > 0 {
		// Resetting paths only unstages them; git refuses a mode with paths.
		if req.Mode != "" && req.Mode != "mixed" {
			return badRequest("mode %q cannot be used with files: resetting files only unstages them", req.Mode)
		}
		if req.Target != "" {
			args = append(args, req.Target)
		}
		args = append(args, "--")
		args = append(args, req.Files...)
	} else {
		if req.Mode != "" {
			args = append(args, "--"+req.Mode)
		}
		if req.Target != "" {
			args = append(args, req.Target, "--")
		}
	}
	return h.gitDone(w, r, c, gitCall{dir: req.Path, args: args})
}

func (h *toolboxAPI) gitRestore(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if len(req.Files) == 0 {
		return badRequest("files is required")
	}
	args := []string{"restore"}
	if req.Staged {
		args = append(args, "--staged")
	}
	if req.Worktree {
		args = append(args, "--worktree")
	}
	if req.Source != "" {
		args = append(args, "--source="+req.Source)
	}
	args = append(append(args, "--"), req.Files...)
	return h.gitDone(w, r, c, gitCall{dir: req.Path, args: args})
}

// GitRemote is one remote of ListRemotesResponse.
type GitRemote struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// ListRemotesResponse is the answer of GET /git/remotes.
type ListRemotesResponse struct {
	Remotes []GitRemote `json:"remotes"`
}

func (h *toolboxAPI) gitAddRemote(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Name == "" || req.URL == "" {
		return badRequest("name and url are required")
	}
	if strings.HasPrefix(req.URL, "-") {
		return badRequest("url %q must not start with '-'", req.URL)
	}
	remotes, err := h.remotes(r, c, req.Path)
	if err != nil {
		return err
	}
	exists := slices.ContainsFunc(remotes, func(g GitRemote) bool { return g.Name == req.Name })
	var args []string
	switch {
	case exists && !req.Overwrite:
		return newProblem(http.StatusConflict, "remote %s already exists (set overwrite to replace its URL)", req.Name)
	case exists:
		args = []string{"remote", "set-url", "--", req.Name, req.URL}
	default:
		args = []string{"remote", "add", "--", req.Name, req.URL}
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: args}); err != nil {
		return err
	}
	if req.Fetch {
		if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"fetch", "--", req.Name}}); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// remotes lists a repository's remotes with their fetch URLs.
func (h *toolboxAPI) remotes(r *http.Request, c *sandboxConn, dir string) ([]GitRemote, error) {
	out, err := h.git(r.Context(), c, gitCall{dir: dir, args: []string{"remote", "-v"}})
	if err != nil {
		return nil, err
	}
	remotes := []GitRemote{}
	for _, line := range strings.Split(out, "\n") {
		// "<name>\t<url> (fetch)"
		name, rest, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		if u, ok := strings.CutSuffix(rest, " (fetch)"); ok {
			remotes = append(remotes, GitRemote{Name: name, URL: u})
		}
	}
	return remotes, nil
}

func (h *toolboxAPI) gitListRemotes(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	remotes, err := h.remotes(r, c, req.Path)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, ListRemotesResponse{Remotes: remotes})
	return nil
}

// configScope is the git config option of a scope; local needs the
// repository's path.
func configScope(req gitRequest) (string, error) {
	switch req.Scope {
	case "", "global":
		return "--global", nil
	case "system":
		return "--system", nil
	case "local":
		if req.Path == "" {
			return "", badRequest("path is required for scope local")
		}
		return "--local", nil
	}
	return "", badRequest("scope %q: use global, local or system", req.Scope)
}

func (h *toolboxAPI) gitSetConfig(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Key == "" {
		return badRequest("key is required")
	}
	scope, err := configScope(req)
	if err != nil {
		return err
	}
	return h.gitDone(w, r, c, gitCall{dir: req.Path, args: []string{"config", scope, "--", req.Key, req.Value}})
}

// GitConfigResponse is the answer of GET /git/config; value is absent when
// the key is not set.
type GitConfigResponse struct {
	Value *string `json:"value,omitempty"`
}

func (h *toolboxAPI) gitGetConfig(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Key == "" {
		return badRequest("key is required")
	}
	scope, err := configScope(req)
	if err != nil {
		return err
	}
	cfg := &process.ProcessConfig{Cmd: "git", Args: []string{"config", scope, "--get", "--", req.Key}}
	if req.Path != "" {
		cfg.Cwd = &req.Path
	}
	res, err := h.runProc(r.Context(), c.Agent, cfg, gitTimeout)
	if err != nil {
		return err
	}
	switch res.exitCode {
	case 0:
		v := strings.TrimSuffix(string(res.stdout), "\n")
		api.WriteJSON(w, http.StatusOK, GitConfigResponse{Value: &v})
	case 1:
		// git's answer for a key that is not set.
		api.WriteJSON(w, http.StatusOK, GitConfigResponse{})
	default:
		return &problem{status: http.StatusBadRequest, message: strings.TrimSpace(string(res.stderr)), source: sourceDaemon}
	}
	return nil
}

func (h *toolboxAPI) gitConfigureUser(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Name == "" || req.Email == "" {
		return badRequest("name and email are required")
	}
	scope, err := configScope(req)
	if err != nil {
		return err
	}
	for _, kv := range [][2]string{{"user.name", req.Name}, {"user.email", req.Email}} {
		if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"config", scope, "--", kv[0], kv[1]}}); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// authenticateScript stores one credential with git's store helper
// (~/.git-credentials, in plain text, as Daytona's call says) and makes that
// helper the user's, so later git commands against the host use it.
const authenticateScript = `printf 'protocol=%s\nhost=%s\nusername=%s\npassword=%s\n\n' "$1" "$2" "$3" "$4" |
git -c credential.helper=store credential approve && git config --global credential.helper store`

// gitCredentialsRequest is the body of POST /git/credentials.
type gitCredentialsRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Host     string `json:"host"`
	Protocol string `json:"protocol"`
}

// gitAuthenticate is dangerouslyAuthenticate: it persists the credential
// in the sandbox, unlike the per-call credentials of clone, push and pull.
func (h *toolboxAPI) gitAuthenticate(w http.ResponseWriter, r *http.Request) {
	var req gitCredentialsRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if req.Username == "" || req.Password == "" {
		WriteError(w, r, badRequest("username and password are required"))
		return
	}
	if req.Host == "" {
		req.Host = "github.com"
	}
	if req.Protocol == "" {
		req.Protocol = "https"
	}
	// git's credential format is one key=value per line.
	for _, v := range []string{req.Username, req.Password, req.Host, req.Protocol} {
		if strings.ContainsAny(v, "\n\r\x00") {
			WriteError(w, r, badRequest("credentials must not contain line breaks or NUL bytes"))
			return
		}
	}
	c, err := h.conn(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	res, err := h.runProc(r.Context(), c.Agent, &process.ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", authenticateScript, "authenticate", req.Protocol, req.Host, req.Username, req.Password},
	}, gitTimeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if res.exitCode != 0 {
		WriteError(w, r, &problem{status: http.StatusBadRequest, message: strings.TrimSpace(string(res.stderr)), source: sourceDaemon})
		return
	}
	w.WriteHeader(http.StatusOK)
}
