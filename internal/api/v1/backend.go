package v1

import (
	"context"
	"io"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// Backend is what the native API needs of the service layer, declared here
// by its consumer as the facades declare theirs; *service.Service implements
// it.
type Backend interface {
	Config() service.Config
	// Identity and Volumes are the aggregates the admin, SSH key and volume
	// routes serve.
	Identity() *identity.Service
	Volumes() *volumes.Service

	CreateSandbox(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, error)
	CreateOrAdopt(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, bool, error)
	GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error)
	DeleteSandbox(ctx context.Context, id string) error
	StartSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	StopSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	PauseSandbox(ctx context.Context, id string, mode sandpit.PauseMode) (sandpit.Sandbox, error)
	ResumeSandbox(ctx context.Context, id string) (sandpit.Sandbox, error)
	Exec(ctx context.Context, id string, req service.ExecRequest) (service.ExecResult, error)
	AgentTarget(ctx context.Context, id string) (addr, token string, err error)
	Agent(ctx context.Context, id string) (agentapi.Agent, error)
	Touch(ctx context.Context, id string, force bool)
	// AgentHTTP is the client of the daemon's calls to the agents, whose
	// transport the agent relay shares.
	AgentHTTP() *agentapi.Link

	ExposePort(ctx context.Context, id string, port int, protocol string) (service.ExposeResult, error)
	ListPorts(ctx context.Context, id string) ([]sandpit.ExposedPort, error)
	Stats(ctx context.Context, id string) (sandpit.Stats, error)
	UpdateNetwork(ctx context.Context, id string, p sandpit.NetworkPolicy) (sandpit.Sandbox, error)
	ResizeSandbox(ctx context.Context, id string, r service.Resize) (sandpit.Sandbox, error)
	NetworkDenials(ctx context.Context, id string) (service.NetworkReport, error)
	UnexposePort(ctx context.Context, id string, port int) error
	AddCustomDomain(ctx context.Context, id, hostname string, port int) (sandpit.CustomDomain, bool, error)
	ListCustomDomains(ctx context.Context, id string) ([]sandpit.CustomDomain, error)
	RemoveCustomDomain(ctx context.Context, id, hostname string) error
	CustomDomainURL(hostname string) string

	Events() *events.Bus
	DebugState(ctx context.Context) (service.State, error)
	PoolStatus(ctx context.Context) (service.PoolStatus, error)

	CreateSnapshot(ctx context.Context, sandboxID string, req service.SnapshotRequest) (sandpit.Template, error)
	Fork(ctx context.Context, parentID string, req service.ForkRequest) ([]service.ForkResult, error)

	RunCode(ctx context.Context, id string, req service.CodeRequest, fn func(interpreter.Event) error) error
	CodeContexts(ctx context.Context, id string) ([]service.CodeContext, error)
	DeleteCodeContext(ctx context.Context, id, name string) error

	CreateSSHAccess(ctx context.Context, idOrName string, valid time.Duration) (service.SSHAccess, error)
	RevokeSSHAccess(ctx context.Context, idOrName string) error
}

var _ Backend = (*service.Service)(nil)

// TemplateBackend is what the handler needs of the template aggregate
// (*templates.Service): templates, snapshots, builds, their logs and the
// uploaded build contexts.
type TemplateBackend interface {
	PutTemplateFiles(ctx context.Context, hash string, r io.Reader, verify bool) error
	HasFiles(ctx context.Context, hash string) bool
	EnsureTemplate(ctx context.Context, spec templates.Spec) (sandpit.Template, sandpit.AddOutcome, error)
	NewBuild(ctx context.Context, templateID string) (sandpit.TemplateBuild, error)
	StartBuild(ctx context.Context, buildID string, def templates.BuildDefinition) (sandpit.TemplateBuild, error)
	CheckBuildDefinition(ctx context.Context, def templates.BuildDefinition) error
	Template(ctx context.Context, ref string) (sandpit.Template, error)
	Templates(ctx context.Context) ([]sandpit.Template, error)
	TemplateTags(ctx context.Context, templateID string) (map[string]string, error)
	DeleteTemplate(ctx context.Context, id string) error
	Snapshots(ctx context.Context, source, name string) ([]sandpit.Template, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Build(ctx context.Context, buildID string) (sandpit.TemplateBuild, error)
	BuildLog(ctx context.Context, buildID string, offset int) ([]templates.LogEntry, bool, error)
	FollowBuildLog(ctx context.Context, buildID string, offset int, fn func(templates.LogEntry) error) error
	// BuildNode names the cluster node that runs a build ("" = this one).
	BuildNode(ctx context.Context, buildID string) string
}

var _ TemplateBackend = (*templates.Service)(nil)
