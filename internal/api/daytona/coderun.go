package daytona

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// codeRun runs a snippet with the interpreter of its language, from the
// image: the code is an argument of the interpreter (python3 -c, node -e),
// never text for a shell.

// CodeRunRequest is the body of POST /process/code-run.
type CodeRunRequest struct {
	Code     string            `json:"code"`
	Language string            `json:"language"`
	Argv     []string          `json:"argv"`
	Envs     map[string]string `json:"envs"`
	Timeout  *float64          `json:"timeout"`
}

// CodeRunResponse is its answer; charts are never produced.
type CodeRunResponse struct {
	ExitCode  int             `json:"exitCode"`
	Result    string          `json:"result"`
	Artifacts codeRunArtifact `json:"artifacts"`
}

type codeRunArtifact struct {
	Charts []any `json:"charts"`
}

// interpreters maps a Daytona language to the command line before the code.
var interpreters = map[string][]string{
	"python":     {"python3", "-c"},
	"javascript": {"node", "-e"},
}

// codeRunScript merges stderr into stdout, as executeCommand does, and
// runs the interpreter with the code and the arguments as its own argv.
const codeRunScript = "exec 2>&1; exec \"$@\""

func (h *processAPI) codeRun(w http.ResponseWriter, r *http.Request) {
	var req CodeRunRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	interp, ok := interpreters[req.Language]
	switch {
	case req.Code == "":
		WriteError(w, r, badRequest("code is required"))
		return
	case !ok:
		WriteError(w, r, badRequest("language %q is not supported: use python or javascript", req.Language))
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
	args := append([]string{"-c", codeRunScript, "code-run"}, interp...)
	args = append(append(args, req.Code), req.Argv...)
	res, err := h.runProc(r.Context(), agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: args, Envs: req.Envs}, timeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, CodeRunResponse{ExitCode: res.exitCode, Result: string(res.stdout), Artifacts: codeRunArtifact{Charts: []any{}}})
}
