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
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Owner     string            `json:"owner"`
	Image     string            `json:"image,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"` // tag -> build id
	CPU       float64           `json:"cpu,omitempty"`
	MemoryMB  int64             `json:"memory_mb,omitempty"`
	StartCmd  string            `json:"start_cmd,omitempty"`
	ReadyCmd  string            `json:"ready_cmd,omitempty"`
	User      string            `json:"user,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	Build     *TemplateBuild    `json:"build,omitempty"` // the newest build
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
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
