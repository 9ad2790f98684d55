package v1

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// DebugState is the body of GET /v1/debug/state: what the store, the router
// and the engine each say, side by side, for operators and consistency
// tests. It needs the daemon's (admin) token like every /v1 route.
type DebugState struct {
	Sandboxes []DebugSandbox `json:"sandboxes"`
	Ports     []Port         `json:"ports"`
	Domains   []DebugDomain  `json:"domains"`
	Routes    []DebugRoute   `json:"routes"`
	// Listeners are the host ports the router has a bound TCP listener on.
	Listeners  []int            `json:"listeners"`
	Containers []DebugContainer `json:"containers"`
}

// DebugSandbox is one store row.
type DebugSandbox struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	State       string `json:"state"`
	StateReason string `json:"state_reason,omitempty"`
	ContainerID string `json:"container_id"`
}

// DebugDomain is one custom-domain row.
type DebugDomain struct {
	Hostname  string `json:"hostname"`
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
}

// DebugRoute is one installed route.
type DebugRoute struct {
	Kind      string `json:"kind"`
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	HostPort  int    `json:"host_port,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	Upstream  string `json:"upstream"`
}

// DebugContainer is one of this daemon's containers as the engine lists it.
type DebugContainer struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	IP        string `json:"ip"`
}

func (h *Handler) debugState(w http.ResponseWriter, r *http.Request) {
	st, err := h.svc.DebugState(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := DebugState{Sandboxes: []DebugSandbox{}, Ports: []Port{}, Domains: []DebugDomain{}, Routes: []DebugRoute{}, Listeners: st.Listeners, Containers: []DebugContainer{}}
	if out.Listeners == nil {
		out.Listeners = []int{}
	}
	for _, sb := range st.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, DebugSandbox{ID: sb.ID, Name: sb.Name, State: string(sb.State), StateReason: sb.StateReason, ContainerID: sb.ContainerID})
	}
	for _, p := range st.Ports {
		q := toPort(p, false)
		q.SandboxID = p.SandboxID
		out.Ports = append(out.Ports, q)
	}
	for _, d := range st.Domains {
		out.Domains = append(out.Domains, DebugDomain{Hostname: d.Hostname, SandboxID: d.SandboxID, Port: d.Port})
	}
	for _, rt := range st.Routes {
		out.Routes = append(out.Routes, DebugRoute{Kind: string(rt.Kind), SandboxID: rt.SandboxID, Port: rt.Port, HostPort: rt.HostPort, Hostname: rt.Hostname, Upstream: rt.Upstream})
	}
	for _, c := range st.Containers {
		out.Containers = append(out.Containers, DebugContainer{ID: c.ID, Name: c.Name, SandboxID: c.SandboxID, State: c.State, IP: c.IP})
	}
	api.WriteJSON(w, http.StatusOK, out)
}
