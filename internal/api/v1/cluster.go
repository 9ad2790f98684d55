package v1

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// ClusterHandler serves the cluster's operator endpoints under /v1/cluster/
// to the admin only: the members' addresses and the Raft state are the
// operator's, not a tenant's, and so is making this node leave or draining
// one. leave is called, after the answer is written, to stop the daemon once
// the node has left.
func ClusterHandler(cl *cluster.Cluster, auth *api.Auth, leave func()) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster/members", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, apitypes.ClusterMembers{Node: cl.NodeName(), Members: wireMembers(cl.Members())})
	})
	mux.HandleFunc("GET /v1/cluster/status", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, wireStatus(cl.Status()))
	})
	mux.HandleFunc("GET /v1/cluster/digest", func(w http.ResponseWriter, r *http.Request) {
		st := cl.Status()
		api.WriteJSON(w, http.StatusOK, apitypes.ClusterDigest{Node: st.Node, AppliedIndex: st.AppliedIndex, Digest: st.Digest})
	})
	mux.HandleFunc("POST /v1/cluster/leave", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		if err := cl.Leave(ctx); err != nil {
			api.WriteError(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, apitypes.ClusterLeft{Node: cl.NodeName(), Left: true})
		if leave != nil {
			go leave()
		}
	})
	mux.HandleFunc("POST /v1/cluster/drain", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.ClusterDrain
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			api.WriteError(w, r, fmt.Errorf("%w: drain body: %v", cluster.ErrBadRequest, err))
			return
		}
		if req.Node == "" {
			api.WriteError(w, r, fmt.Errorf("%w: drain body names no node", cluster.ErrBadRequest))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		if err := cl.Drain(ctx, req.Node, req.Drain); err != nil {
			api.WriteError(w, r, err)
			return
		}
		cl.Logger().Info("cluster: drain flag set", "target", req.Node, "draining", req.Drain)
		n, _ := cl.Replica().FSM().Node(req.Node)
		api.WriteJSON(w, http.StatusOK, apitypes.ClusterDrained{Node: n.ID, Draining: n.Draining})
	})
	return adminOnly(auth, mux)
}

// adminOnly admits only an admin's credential.
func adminOnly(auth *api.Auth, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, err := auth.Authorize(r, api.BearerToken(r))
		if err == nil {
			if p, _ := sandpit.PrincipalFrom(r.Context()); !p.Admin {
				err = fmt.Errorf("%w: the cluster's endpoints need an admin token", sandpit.ErrForbidden)
			}
		}
		if err != nil {
			api.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wireMembers is the members' answer on the wire.
func wireMembers(ms []cluster.MemberStatus) []apitypes.ClusterMember {
	var out []apitypes.ClusterMember
	for _, m := range ms {
		out = append(out, apitypes.ClusterMember{
			Name: m.Name, Gossip: m.Gossip, State: m.State, Meta: apitypes.ClusterMemberMeta(m.Meta),
			Voter: m.Voter, Leader: m.Leader, Draining: m.Draining, MaxSandboxes: m.MaxSandboxes, Placements: m.Placements,
		})
	}
	return out
}

// wireStatus is a node's status on the wire.
func wireStatus(st cluster.NodeStatus) apitypes.ClusterNodeStatus {
	return apitypes.ClusterNodeStatus{
		Node: st.Node, State: st.State, Leader: st.Leader, Term: st.Term, AppliedIndex: st.AppliedIndex, Digest: st.Digest,
		Placements: st.Placements, Names: st.Names, Hostnames: st.Hostnames, Claims: st.Claims, Draining: st.Draining,
	}
}
