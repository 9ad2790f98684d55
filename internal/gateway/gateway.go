package gateway

import (
	"log/slog"

	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// Gateway is a cluster node's HTTP front: it sends each request to the node
// that must serve it (the sandbox's owner, the node placement picks for a
// create), answers listings and event streams for the whole cluster, and
// forwards preview traffic to the owner's proxy. What it knows of the
// cluster it reads from the Raft index and gossip through *cluster.Cluster;
// what it knows of a request it reads from the surfaces' route tables.
type Gateway struct {
	cl   *cluster.Cluster
	idx  *cluster.FSM
	node string
	log  *slog.Logger
}

// New returns the gateway of the node cl runs.
func New(cl *cluster.Cluster) *Gateway {
	return &Gateway{cl: cl, idx: cl.Replica().FSM(), node: cl.NodeName(), log: cl.Logger()}
}
