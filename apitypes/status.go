package apitypes

// Status is the body of GET /v1/status: what an operator checks first.
type Status struct {
	Version string        `json:"version"`
	UptimeS int64         `json:"uptime_s"`
	Router  string        `json:"router"`
	Engine  EngineStatus  `json:"engine"`
	Store   StoreStatus   `json:"store"`
	Pool    PoolStatus    `json:"pool"`
	Cluster ClusterStatus `json:"cluster"`
	Disk    DiskStatus    `json:"disk"`
	Pause   PauseStatus   `json:"pause"`
	// AwaitedTemplates are the daemon's templates whose image is not built
	// yet (name -> image): served as soon as it is.
	AwaitedTemplates map[string]string `json:"awaited_templates,omitempty"`
	// AwaitedBuilds are the awaited templates whose image is being built,
	// and where each build is (name -> "step 3/7: RUN ..."): a create of
	// one waits for its build.
	AwaitedBuilds map[string]string `json:"awaited_builds,omitempty"`
}

// DiskStatus says whether sandboxes' writable data is bounded. Without a
// limit (LimitMB 0) Warning says that tenants can fill the host's disk.
type DiskStatus struct {
	LimitMB int64 `json:"limit_mb"`
	// Mode is how the limit holds: "quota" (the engine enforces it on the
	// writable layer), "watcher" (the daemon measures the writable layer
	// and stops a sandbox past it, within seconds), or "none".
	Mode        string `json:"mode"`
	Enforceable bool   `json:"enforceable"`
	Warning     string `json:"warning,omitempty"`
}

// PauseStatus says what a memory pause does under the daemon's OCI runtime:
// Memory is "checkpoint" (the processes are written to the data directory
// and the container stops, so the sandbox holds no memory while paused,
// and the pause outlives engine restarts) or "freezer" (the processes are
// frozen in place and keep their memory). Why says, for the freezer, why
// the runtime cannot checkpoint.
type PauseStatus struct {
	Runtime string `json:"runtime"`
	Memory  string `json:"memory"`
	Why     string `json:"why,omitempty"`
}

// EngineStatus is the container engine's answer to a ping.
type EngineStatus struct {
	Name      string  `json:"name"`
	OK        bool    `json:"ok"`
	Error     string  `json:"error,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
}

// StoreStatus describes the SQLite store and its single writer.
type StoreStatus struct {
	DataDir     string           `json:"data_dir"`
	Sandboxes   map[string]int64 `json:"sandboxes"`
	WaitCount   int64            `json:"wait_count"`
	WaitSeconds float64          `json:"wait_seconds"`
}

// PoolStatus describes the warm pool; Enabled is false without one.
type PoolStatus struct {
	Enabled bool             `json:"enabled"`
	Ready   map[string]int64 `json:"ready,omitempty"`
}

// ClusterStatus describes the cluster this daemon belongs to; a single
// daemon is a cluster of one.
type ClusterStatus struct {
	Enabled bool   `json:"enabled"`
	Node    string `json:"node"`
	Nodes   int    `json:"nodes"`
}
