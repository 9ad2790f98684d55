package sandpit

import (
	"errors"
	"time"
)

// ErrBuildConflict: another build of the template is running with a
// different definition. Two builds racing for one name cannot both run: the
// schema holds at most one running build per template.
var ErrBuildConflict = errors.New("another build of this template is in progress")

// BuildState is where a template build is.
type BuildState string

const (
	// BuildWaiting: the build was requested and waits for its definition (E2B
	// asks for a build id before it uploads files and sends the steps) or for
	// a build slot.
	BuildWaiting BuildState = "waiting"
	// BuildBuilding: the engine is building the image.
	BuildBuilding BuildState = "building"
	// BuildReady: the image is built and tagged; sandboxes can run it.
	BuildReady BuildState = "ready"
	// BuildError: the build failed; Error says why and nothing was tagged.
	BuildError BuildState = "error"
)

// Done reports whether the build has ended, one way or the other.
func (s BuildState) Done() bool { return s == BuildReady || s == BuildError }

// ErrSnapshotInUse: a sandbox still runs from the snapshot's image, so the
// snapshot cannot be deleted out from under it.
var ErrSnapshotInUse = errors.New("snapshot in use by a sandbox")

// TemplateKind says where a template's image comes from.
type TemplateKind string

const (
	// KindBuild: built by the engine from a definition (the default).
	KindBuild TemplateKind = "build"
	// KindSnapshot: committed from a sandbox's filesystem.
	KindSnapshot TemplateKind = "snapshot"
	// KindFork: the snapshot a fork boots its copies from; it is listed
	// nowhere and goes when no sandbox runs its image any more.
	KindFork TemplateKind = "fork"
)

// Or is the kind, with "" read as KindBuild.
func (k TemplateKind) Or() TemplateKind {
	if k == "" {
		return KindBuild
	}
	return k
}

// Template is one row of the templates table: a named environment an owner
// builds and creates sandboxes from. Its image is the one its newest ready
// build made.
type Template struct {
	ID    string
	Owner string
	// Name is unique per owner when non-empty (a partial unique index);
	// "" is an anonymous template reached by its id only.
	Name string
	// Image is what sandboxes created from the template run: the image of
	// its newest ready build ("" until one is ready).
	Image string
	// BuildID is the template's newest build, whatever its state.
	BuildID string
	// CPU and MemoryMB are the defaults of a sandbox created from the
	// template (0 = the daemon's defaults).
	CPU      float64
	MemoryMB int64
	// StartCmd runs, detached, when a sandbox is created from the template;
	// ReadyCmd is polled until it exits 0 before the create answers.
	StartCmd string
	ReadyCmd string
	// User is the account the template's sandboxes act as by default ("" =
	// the image's or the surface's default).
	User    string
	Workdir string
	// Kind is where the image comes from; SourceSandbox is the sandbox a
	// snapshot or fork base was committed from ("" for a built template).
	Kind          TemplateKind
	SourceSandbox string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// TemplateBuild is one row of the template_builds table.
type TemplateBuild struct {
	ID         string
	TemplateID string
	State      BuildState
	// ContentHash identifies what is built: the definition and the hash of
	// its context. Two builds of one owner with one content hash make one
	// image.
	ContentHash string
	// Definition is the build's definition as the surface sent it (JSON),
	// kept so a user can see what a template was built from.
	Definition string
	// Dockerfile is what the engine was asked to build.
	Dockerfile string
	Image      string // set when Ready
	Error      string // set when Error
	// StartCmd, ReadyCmd, User and Workdir are what the build sets on its
	// template when it becomes ready.
	StartCmd  string
	ReadyCmd  string
	User      string
	Workdir   string
	CPU       float64
	MemoryMB  int64
	CreatedAt time.Time
	StartedAt time.Time // zero while waiting
	EndedAt   time.Time // zero until done
	// QueuePosition is the build's place in the queue for a build slot
	// (1 = next); 0 when it is not waiting for one. Not stored: it is the
	// building process's view.
	QueuePosition int
}
