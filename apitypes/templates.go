package apitypes

import "time"

// TemplateFiles places an uploaded archive (PUT /v1/templates/files/{sha256})
// in a build's context under Prefix ("" = the context's root).
type TemplateFiles struct {
	Prefix string `json:"prefix,omitempty"`
	Hash   string `json:"hash"`
}

// BuildTemplateRequest is the body of POST /v1/templates: a Dockerfile and
// its context, built into the caller's template of that name (made on the
// first build, rebuilt by later ones).
type BuildTemplateRequest struct {
	Name       string `json:"name,omitempty"`
	Dockerfile string `json:"dockerfile"`
	// Context is the SHA-256 of an uploaded tar (optionally gzipped) that is
	// the build context; Files places more archives under prefixes.
	Context  string          `json:"context,omitempty"`
	Files    []TemplateFiles `json:"files,omitempty"`
	StartCmd string          `json:"start_cmd,omitempty"`
	ReadyCmd string          `json:"ready_cmd,omitempty"`
	User     string          `json:"user,omitempty"`
	Workdir  string          `json:"workdir,omitempty"`
	CPU      float64         `json:"cpu,omitempty"`
	MemoryMB int64           `json:"memory_mb,omitempty"`
	Tags     []string        `json:"tags,omitempty"`
	// NoCache builds anew: no replay of an earlier build of the same
	// definition and no layer cache.
	NoCache bool `json:"no_cache,omitempty"`
}

// Template is a template as /v1 reports it.
type Template struct {
	ID       string            `json:"id"`
	Name     string            `json:"name,omitempty"`
	Owner    string            `json:"owner"`
	Image    string            `json:"image,omitempty"`
	Tags     map[string]string `json:"tags,omitempty"` // tag -> build id
	CPU      float64           `json:"cpu,omitempty"`
	MemoryMB int64             `json:"memory_mb,omitempty"`
	StartCmd string            `json:"start_cmd,omitempty"`
	ReadyCmd string            `json:"ready_cmd,omitempty"`
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Build    *TemplateBuild    `json:"build,omitempty"` // the newest build
	// Kind is "build", or "snapshot" for a snapshot of SourceSandbox.
	Kind          string    `json:"kind,omitempty"`
	SourceSandbox string    `json:"source_sandbox,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	// Name makes a named snapshot (a new build of it when it exists); ""
	// makes an anonymous one, reached by its id.
	Name string `json:"name,omitempty"`
}

// ListSnapshotsResponse is the body of GET /v1/snapshots.
type ListSnapshotsResponse struct {
	Snapshots []Template `json:"snapshots"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	Count int `json:"count,omitempty"` // 0 = 1
	// TimeoutS is each copy's time to live; 0 keeps the parent's remaining
	// time (none when the parent has no deadline).
	TimeoutS int    `json:"timeout_s,omitempty"`
	Name     string `json:"name,omitempty"` // only with a count of 1
}

// ForkResponse is the body of a fork's answer: one entry per copy, each
// with the copy or why it failed.
type ForkResponse struct {
	Forks []ForkResult `json:"forks"`
}

// ForkResult is one copy of a fork.
type ForkResult struct {
	Sandbox *Sandbox     `json:"sandbox,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"`
}

// TemplateBuild is one build of a template.
type TemplateBuild struct {
	ID         string     `json:"id"`
	TemplateID string     `json:"template_id"`
	State      string     `json:"state"` // waiting, building, ready, error
	Image      string     `json:"image,omitempty"`
	Error      string     `json:"error,omitempty"`
	Dockerfile string     `json:"dockerfile,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	// QueuePosition is the build's place in the fair queue for a build
	// slot (1 = next), while it waits for one.
	QueuePosition int `json:"queue_position,omitempty"`
}

// BuildTemplateResponse answers POST /v1/templates (202 while it builds).
type BuildTemplateResponse struct {
	Template Template      `json:"template"`
	Build    TemplateBuild `json:"build"`
}

// ListTemplatesResponse is the body of GET /v1/templates.
type ListTemplatesResponse struct {
	Templates []Template `json:"templates"`
}

// BuildLogEntry is one line of GET .../builds/{id}/logs, which streams them
// as newline-delimited JSON.
type BuildLogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}
