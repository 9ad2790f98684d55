package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/gateway"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// ClusterConfig is what `serve --cluster` adds to a daemon.
type ClusterConfig struct {
	NodeName        string // default <hostname>-<instance id prefix>
	RaftListen      string // cluster port: Raft and node-to-node forwarding
	GossipListen    string
	Advertise       string // host the other nodes reach this one at
	Join            []string
	Bootstrap       bool
	BootstrapExpect int
	KeyFile         string
	// DeadNodeGrace and Failover decide what becomes of the sandboxes of a
	// node that stays dead (cluster.Config).
	DeadNodeGrace time.Duration
	Failover      string
	// RecreateGiveUp is how long a node retries re-creating a dead node's
	// sandbox before the sandbox becomes lost (service.Config).
	RecreateGiveUp time.Duration
	// Fast shortens Raft's and gossip's timers (tests on one machine).
	Fast bool
}

// validCluster refuses cluster flags that cannot work (no key, an
// unreadable or short key, a negative expected count) before the daemon
// touches its data directory, so a bad flag leaves nothing behind.
func validCluster(cfg Config) error {
	cc := cfg.Cluster
	if cc == nil {
		return nil
	}
	if cc.KeyFile == "" {
		return fmt.Errorf("--cluster needs --cluster-key-file")
	}
	if _, err := cluster.LoadKeyFile(cc.KeyFile); err != nil {
		return fmt.Errorf("--cluster-key-file: %w", err)
	}
	if cc.BootstrapExpect < 0 {
		return fmt.Errorf("--bootstrap-expect must not be negative")
	}
	if cc.DeadNodeGrace < 0 {
		return fmt.Errorf("--dead-node-grace must not be negative")
	}
	if cc.RecreateGiveUp < 0 {
		return fmt.Errorf("--recreate-give-up must not be negative")
	}
	if cc.Failover != "" {
		if err := cluster.ValidFailover(cc.Failover); err != nil {
			return err
		}
	}
	return nil
}

// startCluster starts this daemon's cluster membership. The default node name
// includes the data directory's instance id, so that daemons on one machine
// differ by data directory alone.
func startCluster(ctx context.Context, cfg Config, instance, apiAddr, proxyAddr string, lim httpguard.ConnLimits) (*cluster.Cluster, error) {
	cc := cfg.Cluster
	if cc.KeyFile == "" {
		return nil, fmt.Errorf("--cluster needs --cluster-key-file")
	}
	keys, err := cluster.LoadKeyFile(cc.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--cluster-key-file: %w", err)
	}
	name := cc.NodeName
	if name == "" {
		host, _ := os.Hostname()
		name = strings.ToLower(host) + "-" + instance[:6]
	}
	var join []string
	for _, j := range cc.Join {
		if j = strings.TrimSpace(j); j != "" {
			join = append(join, j)
		}
	}
	return cluster.Start(ctx, cluster.Config{
		NodeName:        name,
		DataDir:         cfg.DataDir,
		RaftListen:      cc.RaftListen,
		ConnLimits:      lim,
		GossipListen:    cc.GossipListen,
		Advertise:       cc.Advertise,
		Join:            join,
		Bootstrap:       cc.Bootstrap,
		BootstrapExpect: cc.BootstrapExpect,
		Keys:            keys,
		Self:            cluster.Node{APIAddr: apiAddr, ProxyAddr: proxyAddr, PublicHost: cfg.PublicHost},
		MaxSandboxes:    cfg.MaxSandboxes,
		ClaimRetention:  cfg.IdempotencyRetention,
		DeadNodeGrace:   cc.DeadNodeGrace,
		Failover:        cc.Failover,
		Logger:          cfg.Logger,
		Fast:            cc.Fast,
	})
}

func clusterReplica(c *cluster.Cluster) *cluster.Replica {
	if c == nil {
		return nil
	}
	return c.Replica()
}

func clusterNodeName(c *cluster.Cluster) string {
	if c == nil {
		return ""
	}
	return c.NodeName()
}

// clusterRouter sends each request about a sandbox to the node that owns it
// and each create to the node placement picks. The credential is checked
// here, with this node's tokens, before anything is forwarded.
func clusterRouter(cl *cluster.Cluster, auth *api.Auth, svc *service.Service, tpl *templates.Service, local http.Handler, routes *gateway.Table) http.Handler {
	return gateway.New(cl).API(local, gateway.Config{
		// Each surface's route table says where a request is served.
		Routes: routes,
		Authenticate: func(r *http.Request) (sandpit.Principal, error) {
			presented := api.BearerToken(r)
			if presented == "" {
				presented = api.WebSocketBearer(r) // the native PTY from a browser
			}
			if strings.HasPrefix(r.URL.Path, "/e2b/") {
				presented = r.Header.Get("X-API-KEY")
			}
			rr, err := auth.Authorize(r, presented)
			if err != nil {
				return sandpit.Principal{}, err
			}
			p, _ := sandpit.PrincipalFrom(rr.Context())
			return p, nil
		},
		// The native listing covers the whole cluster; its page tokens name
		// a position that every node's store continues from.
		ListToken:    store.PageTokenAfter,
		ListPosition: store.PagePosition,
		// What the gateway refuses itself (no room for a create, an owner
		// that does not answer, a sandbox lost with its node) is answered in
		// the request's surface's shape.
		WriteError: writeSurfaceProblem,
		Lost:       answerLost,
		// Without a registry a template's image is on the node that built
		// it only, and its creates are placed there.
		TemplateNodes: tpl.TemplateNodes,
	})
}

// routeTable is the surfaces' routes as the cluster's gateway reads them.
func routeTable(native *v1.Handler, e *e2b.Handler, dt *daytona.Handler) *gateway.Table {
	return gateway.NewTable(
		gateway.Surface{Routes: native.Forwarded()},
		gateway.Surface{Mount: e2b.Prefix, Routes: e.Forwarded()},
		gateway.Surface{Routes: e.RootRoutes()},
		gateway.Surface{Mount: daytona.DefaultPrefix, Routes: dt.Forwarded()},
	)
}

// reconcileCluster waits for the cluster to have a leader and for this node
// to have applied the log it finds, then releases this node's placements
// that have no sandbox (see service.ReconcileCluster).
func reconcileCluster(ctx context.Context, cl *cluster.Cluster, svc *service.Service, started time.Time, keep time.Duration, log *slog.Logger) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := cl.WaitCaughtUp(wctx)
		cancel()
		if err == nil {
			err = svc.ReconcileCluster(ctx, started, keep)
		}
		if err == nil {
			return
		}
		log.Warn("cluster reconcile, retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// writeSurfaceProblem answers an error the cluster router decided itself
// (no capacity, a lost sandbox) in the shape of the surface the request came
// through, with the status of the one mapping in api.Classify.
func writeSurfaceProblem(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case strings.HasPrefix(r.URL.Path, e2b.Prefix+"/"):
		e2b.WriteError(w, r, err)
	case strings.HasPrefix(r.URL.Path, daytona.DefaultPrefix+"/"):
		daytona.WriteError(w, r, err)
	default:
		api.WriteError(w, r, err)
	}
}

// recreateGiveUp is the node's --recreate-give-up; zero (the service's
// default) on a single node, which re-creates nothing.
func recreateGiveUp(cc *ClusterConfig) time.Duration {
	if cc == nil {
		return 0
	}
	return cc.RecreateGiveUp
}
