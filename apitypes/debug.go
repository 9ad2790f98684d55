package apitypes

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
	// PoolSlots are the warm pool's slots, free and adopted, so that a
	// pooled container can be told from a stray one.
	PoolSlots []DebugPoolSlot `json:"pool_slots"`
}

// DebugPoolSlot is one warm-pool slot: its container (by name), whether its
// agent answered, and the sandbox that adopted it ("" while free).
type DebugPoolSlot struct {
	ID          string `json:"id"`
	ContainerID string `json:"container_id"`
	Ready       bool   `json:"ready"`
	SandboxID   string `json:"sandbox_id,omitempty"`
}

// DebugSandbox is one store row.
type DebugSandbox struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	State       string `json:"state"`
	StateReason string `json:"state_reason,omitempty"`
	// PauseMode is "memory" or "filesystem" for a paused sandbox: a
	// filesystem pause's container is stopped.
	PauseMode   string `json:"pause_mode,omitempty"`
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
