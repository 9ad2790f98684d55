package v1

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
)

func (h *Handler) debugState(w http.ResponseWriter, r *http.Request) {
	st, err := h.svc.DebugState(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.DebugState{Sandboxes: []apitypes.DebugSandbox{}, Ports: []apitypes.Port{}, Domains: []apitypes.DebugDomain{}, Routes: []apitypes.DebugRoute{}, Listeners: st.Listeners, Containers: []apitypes.DebugContainer{}, PoolSlots: []apitypes.DebugPoolSlot{}}
	if out.Listeners == nil {
		out.Listeners = []int{}
	}
	for _, sb := range st.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, apitypes.DebugSandbox{ID: sb.ID, Name: sb.Name, State: string(sb.State), StateReason: sb.StateReason, PauseMode: string(sb.PauseMode), ContainerID: sb.ContainerID})
	}
	for _, p := range st.Ports {
		q := toPort(p, false)
		q.SandboxID = p.SandboxID
		out.Ports = append(out.Ports, q)
	}
	for _, d := range st.Domains {
		out.Domains = append(out.Domains, apitypes.DebugDomain{Hostname: d.Hostname, SandboxID: d.SandboxID, Port: d.Port})
	}
	for _, rt := range st.Routes {
		out.Routes = append(out.Routes, apitypes.DebugRoute{Kind: string(rt.Kind), SandboxID: rt.SandboxID, Port: rt.Port, HostPort: rt.HostPort, Hostname: rt.Hostname, Upstream: rt.Upstream})
	}
	for _, c := range st.Containers {
		out.Containers = append(out.Containers, apitypes.DebugContainer{ID: c.ID, Name: c.Name, SandboxID: c.SandboxID, State: c.State, IP: c.IP})
	}
	for _, sl := range st.PoolSlots {
		out.PoolSlots = append(out.PoolSlots, apitypes.DebugPoolSlot{ID: sl.ID, ContainerID: sl.ContainerID, Ready: sl.Ready, SandboxID: sl.SandboxID})
	}
	api.WriteJSON(w, http.StatusOK, out)
}
