// Package driver is the seam between the service and whatever runs sandboxes.
// driver/docker is the implementation today; a Firecracker one can follow.
package driver

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Labels every managed container carries, so a restarted daemon can reconcile
// the engine with the store.
const (
	LabelManaged   = "sandpit.managed"
	LabelSandboxID = "sandpit.sandbox-id"
	// LabelInstance names the daemon instance (its data directory) that
	// owns the container.
	LabelInstance = "sandpit.instance"
	// LabelPool marks a pooled container (its value is the pool key); a
	// pooled container is never listed as a sandbox of its own.
	LabelPool = "sandpit.pool"
	// LabelRun is optional: tests set it to tag what one test run created.
	LabelRun = "sandpit.run"
)

// InstanceLabels are the labels of everything a daemon makes in the engine
// (containers, images): the operator's extra labels (tests tag their runs)
// and, when set, the daemon's instance, which reconcile and the janitors
// match.
func InstanceLabels(extra map[string]string, instance string) map[string]string {
	l := maps.Clone(extra)
	if l == nil {
		l = map[string]string{}
	}
	if instance != "" {
		l[LabelInstance] = instance
	}
	return l
}

var (
	// ErrNotFound: the engine has no such container.
	ErrNotFound = errors.New("container not found")
	// ErrImageNotFound: the image is not available locally.
	ErrImageNotFound = errors.New("image not found")
)

// Spec describes a sandbox's container.
type Spec struct {
	SandboxID string
	// Name is the container's name; "" names it after SandboxID. Cluster
	// nodes sharing one engine give each copy of a sandbox its own name,
	// so a re-creation never collides with the dead node's container.
	Name      string
	Image     string
	Env       map[string]string // default environment of every process
	Labels    map[string]string // extra labels, added to the managed ones
	CPU       float64           // cores; 0 = no limit
	MemoryMB  int64             // 0 = no limit
	PidsLimit int64             // 0 = 1024
	// DiskMB limits the writable layer; only set it when the engine's
	// storage driver enforces it (see docker.Docker.DiskQuota).
	DiskMB int64
	// Runtime is the OCI runtime to run under ("" = the engine's default).
	Runtime string
	// AgentBinary is the host path of the sandpit executable, bind-mounted
	// read-only and run as PID 1 with `agent` as its argument.
	AgentBinary string
	AgentToken  string
	// AgentUser is the account the agent acts as when a request names none;
	// empty (or a name the image lacks) means root.
	AgentUser string
	// Mounts are the engine volumes mounted into the container.
	Mounts []Mount
	// CAFile is the host path of the daemon's egress CA certificate,
	// bind-mounted read-only at agentapi.CAPath for the agent to trust;
	// "" mounts none.
	CAFile string
}

// Container is the engine's view of one sandbox.
type Container struct {
	ID        string
	SandboxID string
	Name      string
	Image     string
	State     string // engine state: created, running, paused, exited, ...
	IP        string // address the host reaches it on
	Labels    map[string]string
	CreatedAt time.Time
	// ExitCode and OOMKilled describe the last exit of a container that is
	// not running; Inspect fills them, List does not.
	ExitCode  int
	OOMKilled bool
	// AgentUser is the Spec's AgentUser ("" = root); Inspect fills it.
	AgentUser string
	// Limits says that Inspect read the container's CPU and MemoryMB
	// limits (0: none).
	Limits   bool
	CPU      float64
	MemoryMB int64
}

// EventKind names the engine events the daemon acts on.
type EventKind string

const (
	EventDie     EventKind = "die"     // the container's main process ended
	EventOOM     EventKind = "oom"     // the kernel's OOM killer struck
	EventDestroy EventKind = "destroy" // the container was removed
)

// Event is one engine event about a managed container.
type Event struct {
	Kind        EventKind
	ContainerID string
	SandboxID   string
	ExitCode    int // EventDie only
}

// Stats is a point-in-time resource sample (sandpit.Stats); the name
// stays for the runtimes that measure it.
type Stats = sandpit.Stats

// Driver creates and controls sandbox containers.
type Driver interface {
	// Create makes (does not start) the container and returns its id.
	Create(ctx context.Context, spec Spec) (string, error)
	Start(ctx context.Context, containerID string) error
	Stop(ctx context.Context, containerID string, timeout time.Duration) error
	// Remove force-removes the container; removing a missing one is not an error.
	Remove(ctx context.Context, containerID string) error
	Inspect(ctx context.Context, containerID string) (Container, error)
	// Output returns the last lines (at most tail) a container wrote to
	// its stdout and stderr: what its agent said before it exited.
	Output(ctx context.Context, containerID string, tail int) (string, error)
	// List returns the containers carrying every given label.
	List(ctx context.Context, labels map[string]string) ([]Container, error)
	Pause(ctx context.Context, containerID string) error
	Unpause(ctx context.Context, containerID string) error
	Stats(ctx context.Context, containerID string) (Stats, error)
	// DiskUsage is the size of the container's writable layer, in bytes:
	// what the sandbox wrote outside its volumes.
	DiskUsage(ctx context.Context, containerID string) (int64, error)
	// Events streams die, oom and destroy events of the containers carrying
	// every given label until ctx ends or the stream breaks; the error
	// channel then yields why. Events that happen while nobody is watching
	// are lost, so a watcher reconciles after it reconnects.
	Events(ctx context.Context, labels map[string]string) (<-chan Event, <-chan error)
	// Update changes a container's cpu and memory limits while it runs
	// (0 leaves a limit as it is), for a pooled container a create adopts.
	Update(ctx context.Context, containerID string, cpu float64, memoryMB int64) error
}

// Checkpointer writes a running container's processes to disk and has a
// later start of that container restore them, memory, open files and
// listening sockets included (gVisor's runsc with its own network stack).
// A driver whose runtime cannot do this offers none; a memory pause then
// freezes the processes in place.
type Checkpointer interface {
	// Checkpoint writes the container's processes into dir, an empty
	// directory, and ends them: the container has exited when it returns,
	// whether or not the checkpoint succeeded.
	Checkpoint(ctx context.Context, containerID, dir string) error
	// RestoreAtNextStart makes the next Start of the container restore
	// the checkpoint in dir instead of booting the container; "" makes
	// the next Start boot it.
	RestoreAtNextStart(containerID, dir string) error
}
