package daytona

import (
	"context"
	"io"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// The facade owns the interfaces it takes of the service layer, one per
// area, so that each area's dependencies are stated where it is written and
// a new route cannot reach for more without saying so. *service.Service
// implements them all but TemplateBackend, which *templates.Service
// implements (Options.Templates).

// AgentBackend is what every toolbox area needs: the sandbox a request
// names, its agent, and the streams held open on it.
type AgentBackend interface {
	Config() service.Config
	GetSandboxByIDOrName(ctx context.Context, idOrName string) (sandpit.Sandbox, error)
	Touch(ctx context.Context, id string, force bool)
	Agent(ctx context.Context, id string) (agentapi.Agent, error)
	AgentHTTP() *agentapi.Link
}

// SandboxBackend is the control plane's: sandboxes, their intervals, labels
// and previews.
type SandboxBackend interface {
	Config() service.Config
	GetSandboxByIDOrName(ctx context.Context, idOrName string) (sandpit.Sandbox, error)
	ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error)
	CreateSandbox(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, error)
	// CreateOrAdopt is a keyed create's: it adopts what an earlier,
	// interrupted attempt under the same id made (see service).
	CreateOrAdopt(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, bool, error)
	DeleteSandbox(ctx context.Context, id string) error
	StartSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	StopSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	ArchiveSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	Archived(sb sandpit.Sandbox) bool
	SetInterval(ctx context.Context, id string, which sandpit.Interval, value int) (sandpit.Sandbox, error)
	UpdateNetwork(ctx context.Context, id string, p sandpit.NetworkPolicy) (sandpit.Sandbox, error)
	ResizeSandbox(ctx context.Context, id string, r service.Resize) (sandpit.Sandbox, error)
	CreateSSHAccess(ctx context.Context, idOrName string, valid time.Duration) (service.SSHAccess, error)
	RevokeSSHAccess(ctx context.Context, idOrName string) error
	RevokeSSHToken(ctx context.Context, idOrName, token string) error
	ValidateSSHAccess(ctx context.Context, token string) (sandboxID string, valid bool, err error)
	SetLabels(ctx context.Context, id string, labels map[string]string) (sandpit.Sandbox, error)
	RefreshActivity(ctx context.Context, id string) error
	CreateSnapshot(ctx context.Context, sandboxID string, req service.SnapshotRequest) (sandpit.Template, error)
	Fork(ctx context.Context, parentID string, req service.ForkRequest) ([]service.ForkResult, error)
	Touch(ctx context.Context, id string, force bool)
	ExposePort(ctx context.Context, id string, port int, protocol string) (service.ExposeResult, error)
	ExposePrivatePort(ctx context.Context, id string, port int) (service.ExposeResult, string, error)
	PreviewToken(ctx context.Context, id string, port int) (string, error)
	PreviewHost(id string, port int) string
	RevokeSignedPreview(ctx context.Context, id, token string, expiresAt time.Time) error
	SignedPreviewRevoked(ctx context.Context, token string) (bool, error)
	SigningKey(ctx context.Context, id string) (string, error)
	RotateSigningKey(ctx context.Context, id string) (string, error)
	SignedFileSandbox(ctx context.Context, id, method, path, expires, signature string) (sandpit.Sandbox, error)
}

// ToolboxBackend is the toolbox's (files, git, LSP, execution, metrics).
type ToolboxBackend interface {
	AgentBackend
	Stats(ctx context.Context, id string) (sandpit.Stats, error)
}

// ProcessBackend is the sessions', PTYs' and interpreters'.
type ProcessBackend interface {
	AgentBackend
	RunCode(ctx context.Context, id string, req service.CodeRequest, fn func(interpreter.Event) error) error
	CreateCodeContext(ctx context.Context, id, name, language, cwd string) error
	CodeContexts(ctx context.Context, id string) ([]service.CodeContext, error)
	DeleteCodeContext(ctx context.Context, id, name string) error
	HasCodeContext(id, name string) bool
}

// EventBackend is the event socket's.
type EventBackend interface {
	Events() *events.Bus
}

// TemplateBackend is the snapshots' and image builds': the caller's
// templates, their builds and logs, and the uploaded build contexts.
type TemplateBackend interface {
	Config() templates.Config
	EnsureTemplate(ctx context.Context, spec templates.Spec) (sandpit.Template, sandpit.AddOutcome, error)
	NewBuild(ctx context.Context, templateID string) (sandpit.TemplateBuild, error)
	StartBuild(ctx context.Context, buildID string, def templates.BuildDefinition) (sandpit.TemplateBuild, error)
	Build(ctx context.Context, buildID string) (sandpit.TemplateBuild, error)
	BuildLog(ctx context.Context, buildID string, offset int) ([]templates.LogEntry, bool, error)
	FollowBuildLog(ctx context.Context, buildID string, offset int, fn func(templates.LogEntry) error) error
	WaitBuild(ctx context.Context, buildID string) (sandpit.TemplateBuild, error)
	Template(ctx context.Context, ref string) (sandpit.Template, error)
	Templates(ctx context.Context) ([]sandpit.Template, error)
	TemplateBuilds(ctx context.Context, templateID string) ([]sandpit.TemplateBuild, error)
	DeleteTemplate(ctx context.Context, id string) error
	PutTemplateFiles(ctx context.Context, hash string, r io.Reader, verify bool) error
	HasFiles(ctx context.Context, hash string) bool
}

// Backend is everything the facade takes: what New is given.
type Backend interface {
	SandboxBackend
	ToolboxBackend
	ProcessBackend
	EventBackend
	// Volumes is the volumes aggregate, which /volumes serves.
	Volumes() *volumes.Service
}

// VolumeBackend is the volumes'; *volumes.Service implements it.
type VolumeBackend interface {
	CreateVolume(ctx context.Context, name string, sizeMB int64) (sandpit.Volume, sandpit.AddOutcome, error)
	GetVolume(ctx context.Context, ref string) (sandpit.Volume, error)
	ListVolumes(ctx context.Context) ([]sandpit.Volume, error)
	DeleteVolume(ctx context.Context, ref string) error
}

var _ Backend = (*service.Service)(nil)
