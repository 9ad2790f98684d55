package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// wakeOnPreview wraps the preview proxy: a request for a paused sandbox made
// with auto-resume resumes it and waits, then goes on to the proxy, which
// finds the sandbox's routes installed again. A paused sandbox without
// auto-resume is left paused. It reads the host as the handlers in front of
// it read it (sandpit.ResolvePreviewHost: the Daytona gate always stands in
// front, so the reading is carried, never made here); resolve reports
// whether the router has a route for the host so read.
//
// A host in E2B's form, <port>-<id>.<domain>, that has no route is answered
// from the sandbox's state (service.TrafficFor), as E2B's edge answers it
// and as the /e2b/envd gateway does: a sandbox that is gone or not running
// gets E2B's 502, which the SDK reads as "not running" (isRunning, a
// command cut off by a kill), rather than the router's plain 404. Hosts in
// Sandpit's own form keep the router's answers.
func wakeOnPreview(svc *service.Service, log *slog.Logger, next http.Handler, resolve func(sandpit.PreviewHost) bool) http.Handler {
	domain := svc.Config().Domain
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ctx, fresh := sandpit.ResolvePreviewHost(r.Context(), r.Host, domain)
		if fresh {
			r = r.WithContext(ctx)
		}
		if !p.OK {
			next.ServeHTTP(w, r)
			return
		}
		id := p.SandboxID
		if _, err := svc.WakeOnTraffic(r.Context(), id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			log.Warn("auto-resume", "sandbox", id, "err", err)
			http.Error(w, "sandpit: the sandbox could not be resumed", http.StatusBadGateway)
			return
		}
		if p.PortFirst() && !resolve(p) {
			st, state, err := svc.TrafficFor(r.Context(), id)
			switch {
			case err != nil:
				log.Warn("preview: sandbox state", "sandbox", id, "err", err)
				e2b.WriteNotRunning(w, id, sandpit.StateError)
				return
			case st == service.TrafficGone:
				e2b.WriteNotRunning(w, id, "")
				return
			case st == service.TrafficNotRunning:
				e2b.WriteNotRunning(w, id, state)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// probeCheckpoints logs, once at start, what a memory pause does under the
// daemon's runtime (pause: see Checkpoints in internal/driver/docker). Under
// the freezer it also says whether the engine host has a working CRIU,
// which runc would need to checkpoint: Sandpit does not use CRIU, and the
// log line tells an operator what a restart of dockerd does to
// memory-paused sandboxes.
func probeCheckpoints(ctx context.Context, log *slog.Logger, pause apitypes.PauseStatus) {
	if pause.Memory == "checkpoint" {
		log.Info("pause: memory pauses write the sandbox's processes to the data directory and stop its container; they survive daemon and engine restarts",
			"runtime", pause.Runtime)
		return
	}
	path, err := exec.LookPath("criu")
	if err != nil {
		log.Info("pause: memory pauses use the freezer; they survive a daemon restart, and become filesystem pauses when the engine restarts",
			"runtime", pause.Runtime, "checkpoint", pause.Why, "criu", "not installed")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	reason := "criu check passed; checkpoints are not used by this version"
	if err != nil {
		reason = "criu check failed: " + firstLine(string(out))
	}
	log.Info("pause: memory pauses use the freezer; they survive a daemon restart, and become filesystem pauses when the engine restarts",
		"runtime", pause.Runtime, "checkpoint", pause.Why, "criu", reason)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
