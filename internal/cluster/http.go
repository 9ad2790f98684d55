package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Handler serves the cluster's operator endpoints under /v1/cluster/. The
// daemon mounts it behind its authentication. leave is called (after the
// answer is written) to stop the daemon once the node has left.
func (c *Cluster) Handler(leave func()) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster/members", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"node": c.cfg.NodeName, "members": c.Members()})
	})
	mux.HandleFunc("GET /v1/cluster/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.Status())
	})
	mux.HandleFunc("GET /v1/cluster/digest", func(w http.ResponseWriter, r *http.Request) {
		st := c.Status()
		writeJSON(w, http.StatusOK, map[string]any{"node": st.Node, "applied_index": st.AppliedIndex, "digest": st.Digest})
	})
	mux.HandleFunc("POST /v1/cluster/leave", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		if err := c.Leave(ctx); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]string{"code": "internal", "message": err.Error()}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"node": c.cfg.NodeName, "left": true})
		if leave != nil {
			go leave()
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
