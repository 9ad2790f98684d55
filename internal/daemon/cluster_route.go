package daemon

import (
	"net/http"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/gateway"
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

// previewSandboxIDs names the sandboxes a preview host may be for: its
// ordinary reading ("<id>-<port>" or "<port>-<id>") and its reading as a
// Daytona signed label ("<port>-<id>-<expiry>-<mac>"); the signed reading is
// tried second, since an ordinary label never has the signed shape's MAC.
func previewSandboxIDs(p sandpit.PreviewHost) []string {
	var ids []string
	if p.OK {
		ids = append(ids, p.SandboxID)
	}
	if id, ok := daytona.SignedPreviewSandbox(p.Label); ok {
		ids = append(ids, id)
	}
	return ids
}
