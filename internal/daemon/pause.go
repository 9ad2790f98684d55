package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// wakeOnPreview wraps the preview proxy: a request for a paused sandbox made
// with auto-resume resumes it and waits, then goes on to the proxy, which
// finds the sandbox's routes installed again. A paused sandbox without
// auto-resume is left paused. parse splits a preview label into sandbox id
// and port (the router's own parser); resolve reports whether the router
// has a route for a host.
//
// A host in E2B's form, <port>-<id>.<domain>, that has no route is answered
// from the sandbox's state (service.TrafficFor), as E2B's edge answers it
// and as the /e2b/envd gateway does: a sandbox that is gone or not running
// gets E2B's 502, which the SDK reads as "not running" (isRunning, a
// command cut off by a kill), rather than the router's plain 404. Hosts in
// Sandpit's own form keep the router's answers.
func wakeOnPreview(svc *service.Service, log *slog.Logger, next http.Handler, parse func(label string) (id string, port int, ok bool), resolve func(host string) bool) http.Handler {
	suffix := "." + strings.TrimSuffix(strings.ToLower(svc.Config().Domain), ".")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		label, ok := strings.CutSuffix(host, suffix)
		if !ok || strings.Contains(label, ".") {
			next.ServeHTTP(w, r)
			return
		}
		id, _, ok := parse(label)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if _, err := svc.WakeOnTraffic(r.Context(), id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			log.Warn("auto-resume", "sandbox", id, "err", err)
			http.Error(w, "sandpit: the sandbox could not be resumed", http.StatusBadGateway)
			return
		}
		if e2bLabel(label) && !resolve(r.Host) {
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

// e2bLabel reports whether a preview label is in E2B's form, port first
// ("49983-<id>"), as E2B's SDKs build it.
func e2bLabel(label string) bool {
	first, _, ok := strings.Cut(label, "-")
	if !ok || first == "" || len(first) > 5 {
		return false
	}
	for _, c := range first {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// probeCheckpoints finds out, once at start, whether the engine host could
// write a paused sandbox's memory to disk (CRIU), and logs the decision.
// Sandpit does not checkpoint either way today: a memory pause is the
// cgroup freezer, which outlives a daemon restart but not an engine
// restart; the log line says so, so that an operator knows what a restart
// of dockerd does to memory-paused sandboxes.
func probeCheckpoints(ctx context.Context, log *slog.Logger) {
	path, err := exec.LookPath("criu")
	if err != nil {
		log.Info("pause: memory pauses use the freezer; they survive a daemon restart, and become filesystem pauses when the engine restarts",
			"criu", "not installed")
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
		"criu", reason)
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
