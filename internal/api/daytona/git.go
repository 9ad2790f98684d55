package daytona

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// Git: every operation is the sandbox's own git, run as a process with an
// argument vector (no shell). Credentials given with a call reach git
// through a credential helper that reads them from that one process's
// environment; nothing is written to the repository's or the user's git
// configuration, so they are used for that call and never stored.

// gitTimeout bounds one git operation (a clone of a large repository takes
// a while).
const gitTimeout = 30 * time.Minute

// credentialHelper answers git's credential requests from the environment.
const credentialHelper = `!f() { test "$1" = get || return 0; echo "username=$SANDPIT_GIT_USERNAME"; echo "password=$SANDPIT_GIT_PASSWORD"; }; f`

// gitCall is one git invocation.
type gitCall struct {
	dir      string // working directory; "" = the agent's default
	args     []string
	username string
	password string
}

// git runs git and returns its stdout, or a 400 carrying git's own message
// when git fails.
func (h *toolboxAPI) git(ctx context.Context, c *sandboxConn, call gitCall) (string, error) {
	envs := map[string]string{"GIT_TERMINAL_PROMPT": "0"}
	args := []string{}
	if call.username != "" || call.password != "" {
		envs["SANDPIT_GIT_USERNAME"] = call.username
		envs["SANDPIT_GIT_PASSWORD"] = call.password
		// The empty helper first drops any configured helper, so the
		// given credentials are the ones used.
		args = append(args, "-c", "credential.helper=", "-c", "credential.helper="+credentialHelper)
	}
	args = append(args, call.args...)
	cfg := &process.ProcessConfig{Cmd: "git", Args: args, Envs: envs}
	if call.dir != "" {
		cfg.Cwd = &call.dir
	}
	res, err := h.runProc(ctx, c.Agent, cfg, gitTimeout)
	if err != nil {
		return "", err
	}
	if res.exitCode != 0 {
		msg := strings.TrimSpace(string(res.stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(res.stdout))
		}
		return "", &problem{status: http.StatusBadRequest, message: msg, source: sourceDaemon}
	}
	return string(res.stdout), nil
}

// gitRequest is the union of the git request bodies' fields.
type gitRequest struct {
	Path          string   `json:"path"`
	URL           string   `json:"url"`
	Branch        string   `json:"branch"`
	CommitID      string   `json:"commit_id"`
	Depth         int      `json:"depth"`
	Insecure      bool     `json:"insecure_skip_tls"`
	Username      string   `json:"username"`
	Password      string   `json:"password"`
	Files         []string `json:"files"`
	Message       string   `json:"message"`
	Author        string   `json:"author"`
	Email         string   `json:"email"`
	AllowEmpty    bool     `json:"allow_empty"`
	Name          string   `json:"name"`
	Remote        string   `json:"remote"`
	SetUpstream   bool     `json:"set_upstream"`
	Bare          bool     `json:"bare"`
	InitialBranch string   `json:"initial_branch"`
	Mode          string   `json:"mode"`
	Target        string   `json:"target"`
	Source        string   `json:"source"`
	Staged        bool     `json:"staged"`
	Worktree      bool     `json:"worktree"`
	Fetch         bool     `json:"fetch"`
	Overwrite     bool     `json:"overwrite"`
	Key           string   `json:"key"`
	Value         string   `json:"value"`
	Scope         string   `json:"scope"`
}

// remoteArgs are the "[remote [branch]]" arguments of push and pull; a
// branch without a remote goes to origin.
func (req gitRequest) remoteArgs() []string {
	if req.Remote == "" && req.Branch == "" {
		return nil
	}
	remote := req.Remote
	if remote == "" {
		remote = "origin"
	}
	if req.Branch == "" {
		return []string{remote}
	}
	return []string{remote, req.Branch}
}

// gitHandler decodes a body (or reads ?path= for a GET), resolves the
// sandbox and runs op; op answers on success.
func (h *toolboxAPI) gitHandler(op gitOp) http.HandlerFunc {
	return h.gitHandlerPath(op, true)
}

// gitOp is one git endpoint's work once its request is decoded.
type gitOp func(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error

// gitHandlerPath is gitHandler for endpoints whose path is optional (git
// config at global scope); a GET also reads key and scope from the query.
func (h *toolboxAPI) gitHandlerPath(op gitOp, needPath bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req gitRequest
		if r.Method == http.MethodGet {
			q := r.URL.Query()
			req.Path, req.Key, req.Scope = q.Get("path"), q.Get("key"), q.Get("scope")
		} else if err := api.DecodeJSON(r, &req, false); err != nil {
			WriteError(w, r, err)
			return
		}
		if req.Path == "" && needPath {
			WriteError(w, r, badRequest("path is required"))
			return
		}
		for _, v := range append([]string{req.Branch, req.Name, req.Remote, req.CommitID, req.Target, req.Source, req.Key}, req.Files...) {
			if strings.HasPrefix(v, "-") {
				WriteError(w, r, badRequest("%q: names and paths must not start with '-'", v))
				return
			}
		}
		c, err := h.conn(r)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		if err := op(w, r, c, req); err != nil {
			WriteError(w, r, err)
		}
	}
}

func (h *toolboxAPI) gitClone(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.URL == "" {
		return badRequest("url is required")
	}
	args := []string{}
	if req.Insecure {
		args = append(args, "-c", "http.sslVerify=false")
	}
	args = append(args, "clone")
	if req.Branch != "" {
		args = append(args, "--branch", req.Branch)
	}
	if req.Depth > 0 {
		args = append(args, "--depth", strconv.Itoa(req.Depth))
	}
	args = append(args, "--", req.URL, req.Path)
	if _, err := h.git(r.Context(), c, gitCall{args: args, username: req.Username, password: req.Password}); err != nil {
		return err
	}
	if req.CommitID != "" {
		if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"checkout", req.CommitID}}); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *toolboxAPI) gitInit(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	args := []string{"init"}
	if req.Bare {
		args = append(args, "--bare")
	}
	if req.InitialBranch != "" {
		args = append(args, "--initial-branch="+req.InitialBranch)
	}
	args = append(args, "--", req.Path)
	if _, err := h.git(r.Context(), c, gitCall{args: args}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *toolboxAPI) gitAdd(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if len(req.Files) == 0 {
		return badRequest("files is required")
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: append([]string{"add", "--"}, req.Files...)}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *toolboxAPI) gitCommit(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Message == "" || req.Author == "" || req.Email == "" {
		return badRequest("message, author and email are required")
	}
	args := []string{"-c", "user.name=" + req.Author, "-c", "user.email=" + req.Email, "commit", "-m", req.Message}
	if req.AllowEmpty {
		args = append(args, "--allow-empty")
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: args}); err != nil {
		return err
	}
	hash, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"rev-parse", "HEAD"}})
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"hash": strings.TrimSpace(hash)})
	return nil
}

// ListBranchResponse is the answer of GET /git/branches.
type ListBranchResponse struct {
	Branches []string `json:"branches"`
	Current  string   `json:"current,omitempty"`
}

func (h *toolboxAPI) gitBranches(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	out, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"branch", "--format=%(HEAD) %(refname:short)"}})
	if err != nil {
		return err
	}
	res := ListBranchResponse{Branches: []string{}}
	for _, line := range strings.Split(out, "\n") {
		if len(line) < 3 {
			continue
		}
		name := line[2:]
		if strings.HasPrefix(name, "(") {
			continue // a detached HEAD is not a branch
		}
		res.Branches = append(res.Branches, name)
		if line[0] == '*' {
			res.Current = name
		}
	}
	api.WriteJSON(w, http.StatusOK, res)
	return nil
}

func (h *toolboxAPI) gitCreateBranch(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Name == "" {
		return badRequest("name is required")
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"branch", req.Name}}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (h *toolboxAPI) gitDeleteBranch(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Name == "" {
		return badRequest("name is required")
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"branch", "-d", req.Name}}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *toolboxAPI) gitCheckout(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	if req.Branch == "" {
		return badRequest("branch is required")
	}
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"checkout", req.Branch}}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *toolboxAPI) gitPush(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	args := []string{"push"}
	if req.SetUpstream {
		args = append(args, "--set-upstream")
	}
	args = append(args, req.remoteArgs()...)
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: args, username: req.Username, password: req.Password}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *toolboxAPI) gitPull(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	// --no-rebase: a pull that has to merge merges, whatever the sandbox's
	// git would otherwise ask about divergent branches.
	args := []string{"pull", "--no-rebase"}
	args = append(args, req.remoteArgs()...)
	if _, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: args, username: req.Username, password: req.Password}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// FileStatus is one entry of a git status.
type FileStatus struct {
	Name     string `json:"name"`
	Staging  string `json:"staging"`
	Worktree string `json:"worktree"`
	Extra    string `json:"extra"`
}

// GitStatus is Daytona's git status.
type GitStatus struct {
	CurrentBranch   string       `json:"currentBranch"`
	Upstream        string       `json:"upstream,omitempty"`
	Ahead           int          `json:"ahead"`
	Behind          int          `json:"behind"`
	BranchPublished bool         `json:"branchPublished"`
	Detached        bool         `json:"detached"`
	FileStatus      []FileStatus `json:"fileStatus"`
}

// statusName maps a porcelain status letter to Daytona's word for it.
func statusName(c byte) string {
	switch c {
	case 'M', 'T':
		return "Modified"
	case 'A':
		return "Added"
	case 'D':
		return "Deleted"
	case 'R':
		return "Renamed"
	case 'C':
		return "Copied"
	case 'U':
		return "Updated but unmerged"
	case '?':
		return "Untracked"
	}
	return "Unmodified"
}

// parseStatus reads `git status --porcelain=v2 --branch -z`.
func parseStatus(out string) GitStatus {
	st := GitStatus{FileStatus: []FileStatus{}}
	recs := strings.Split(out, "\x00")
	for i := 0; i < len(recs); i++ {
		rec := recs[i]
		switch {
		case strings.HasPrefix(rec, "# branch.head "):
			st.CurrentBranch = strings.TrimPrefix(rec, "# branch.head ")
			if st.CurrentBranch == "(detached)" {
				st.Detached = true
			}
		case strings.HasPrefix(rec, "# branch.upstream "):
			st.Upstream = strings.TrimPrefix(rec, "# branch.upstream ")
			st.BranchPublished = true
		case strings.HasPrefix(rec, "# branch.ab "):
			f := strings.Fields(strings.TrimPrefix(rec, "# branch.ab "))
			if len(f) == 2 {
				st.Ahead, _ = strconv.Atoi(strings.TrimPrefix(f[0], "+"))
				st.Behind, _ = strconv.Atoi(strings.TrimPrefix(f[1], "-"))
			}
		case strings.HasPrefix(rec, "1 "), strings.HasPrefix(rec, "u "):
			// "1 XY sub mH mI mW hH hI path"; "u XY sub m1 m2 m3 mW h1 h2 h3 path".
			n := 9
			if rec[0] == 'u' {
				n = 11
			}
			f := strings.SplitN(rec, " ", n)
			if len(f) == n {
				st.FileStatus = append(st.FileStatus, FileStatus{Name: f[n-1], Staging: statusName(f[1][0]), Worktree: statusName(f[1][1])})
			}
		case strings.HasPrefix(rec, "2 "):
			// "2 XY sub mH mI mW hH hI Xscore path", then the original path.
			f := strings.SplitN(rec, " ", 10)
			if len(f) == 10 {
				fs := FileStatus{Name: f[9], Staging: statusName(f[1][0]), Worktree: statusName(f[1][1])}
				if i+1 < len(recs) {
					i++
					fs.Extra = recs[i]
				}
				st.FileStatus = append(st.FileStatus, fs)
			}
		case strings.HasPrefix(rec, "? "):
			st.FileStatus = append(st.FileStatus, FileStatus{Name: rec[2:], Staging: "Untracked", Worktree: "Untracked"})
		}
	}
	return st
}

func (h *toolboxAPI) gitStatus(w http.ResponseWriter, r *http.Request, c *sandboxConn, req gitRequest) error {
	out, err := h.git(r.Context(), c, gitCall{dir: req.Path, args: []string{"status", "--porcelain=v2", "--branch", "-z"}})
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, parseStatus(out))
	return nil
}
