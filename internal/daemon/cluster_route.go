package daemon

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/gateway"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// clusterPreview fronts the builtin proxy of a cluster node: previews and
// custom domains of sandboxes other nodes run go to their owner's proxy; a
// single node's proxy is local as it always was.
func clusterPreview(cl *cluster.Cluster, cfg Config, local http.Handler) http.Handler {
	if cl == nil {
		return local
	}
	return gateway.New(cl).Preview(local, gateway.PreviewConfig{Domain: cfg.Domain, SandboxIDs: previewSandboxIDs})
}

// previewSandboxIDs reads a preview host label as an ordinary preview
// ("<id>-<port>" or "<port>-<id>") and as a Daytona signed one
// ("<port>-<id>-<expiry>-<mac>"); the signed reading is tried second, since
// an ordinary label never has the signed shape's MAC.
func previewSandboxIDs(label string) []string {
	var ids []string
	if id, _, ok := builtin.ParsePreviewLabel(label); ok {
		ids = append(ids, id)
	}
	if id, ok := daytona.SignedPreviewSandbox(label); ok {
		ids = append(ids, id)
	}
	return ids
}
