// Package ui is the web dashboard served at /ui: plain HTML, CSS and
// JavaScript embedded in the binary, no build step. Its one library, the
// terminal xterm.js, is vendored under static/vendor/xterm (pinned in
// xterm/package-lock.json, reproduced by scripts/update-ui-vendor.sh). The
// page holds the token the operator signs in with (in the tab's session
// storage) and talks to the same /v1 API, event stream and /metrics as
// every other client; the static files themselves need no token.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

// Handler serves the dashboard under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Scripts come from this origin only, never inline, so text a
		// sandbox controls (names, labels, command output) cannot run as
		// script even if it slipped past the escaping. Styles may be
		// inline because the terminal (xterm.js) sizes and colours its
		// rows with generated style elements and attributes; CSS can
		// load nothing from elsewhere (default-src, img-src), and the
		// page puts no sandbox text in as markup. connect-src 'self'
		// covers the terminal's WebSocket to this origin.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
