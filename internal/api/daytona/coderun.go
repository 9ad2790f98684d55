package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
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

// CodeRunResponse is its answer. Charts come only from a sandbox with a
// code interpreter (see runOnKernel).
type CodeRunResponse struct {
	ExitCode  int             `json:"exitCode"`
	Result    string          `json:"result"`
	Artifacts codeRunArtifact `json:"artifacts"`
}

type codeRunArtifact struct {
	Charts []map[string]any `json:"charts"`
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
	id, agent, err := h.agentOf(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if req.Language == "python" && len(req.Argv) == 0 {
		res, err := h.runOnKernel(r.Context(), id, req, timeout)
		switch {
		case err == nil:
			api.WriteJSON(w, http.StatusOK, res)
			return
		case !errors.Is(err, service.ErrNoInterpreter):
			WriteError(w, r, err)
			return
		}
		// Without an interpreter the code runs as a script, as before.
	}
	args := append([]string{"-c", codeRunScript, "code-run"}, interp...)
	args = append(append(args, req.Code), req.Argv...)
	res, err := h.runProc(r.Context(), agent, &process.ProcessConfig{Cmd: "/bin/sh", Args: args, Envs: req.Envs}, timeout)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, CodeRunResponse{ExitCode: res.exitCode, Result: string(res.stdout), Artifacts: codeRunArtifact{Charts: []map[string]any{}}})
}

// runOnKernel runs the code on the sandbox's code interpreter, in its
// default Python context, the kernel the E2B facade and /v1 use too. The
// result is what the code printed, both streams in the order written, then
// the traceback of an exception, which also makes the exit code 1, as a
// script's uncaught exception would. Each figure the code shows is a chart
// artifact: the chart the interpreter read from it (type, title, labels,
// elements) with its PNG, as Daytona's SDK reports charts.
func (h *processAPI) runOnKernel(ctx context.Context, id string, req CodeRunRequest, timeout time.Duration) (CodeRunResponse, error) {
	out := CodeRunResponse{Artifacts: codeRunArtifact{Charts: []map[string]any{}}}
	var result strings.Builder
	err := h.svc.RunCode(ctx, id, service.CodeRequest{Code: req.Code, Language: "python", Env: req.Envs, Timeout: timeout}, func(ev interpreter.Event) error {
		switch ev.Type {
		case interpreter.EventStdout, interpreter.EventStderr:
			result.WriteString(ev.Text)
		case interpreter.EventError:
			out.ExitCode = 1
			tb := ev.TracebackText()
			if tb == "" {
				tb = ev.Name + ": " + ev.Value
			}
			result.WriteString(tb)
			if !strings.HasSuffix(tb, "\n") {
				result.WriteString("\n")
			}
		case interpreter.EventResult:
			if ev.PNG != "" {
				out.Artifacts.Charts = append(out.Artifacts.Charts, chartOf(ev))
			}
		}
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		// As a script past its timeout; the interpreter interrupts the
		// code and the context stays usable.
		return CodeRunResponse{}, &problem{status: http.StatusRequestTimeout, message: "command execution timeout", code: codeExecTimeout, source: sourceDaemon}
	}
	if err != nil {
		return CodeRunResponse{}, err
	}
	out.Result = result.String()
	return out, nil
}

// chartOf is a figure's chart artifact: the interpreter's chart metadata
// where it read any, "unknown" otherwise, with the figure's PNG.
func chartOf(ev interpreter.Event) map[string]any {
	chart := map[string]any{}
	if len(ev.Chart) > 0 {
		_ = json.Unmarshal(ev.Chart, &chart)
	}
	if _, ok := chart["type"]; !ok {
		chart["type"] = "unknown"
	}
	if _, ok := chart["elements"]; !ok {
		chart["elements"] = []any{}
	}
	chart["png"] = ev.PNG
	return chart
}
