package driver

import (
	"context"
	"errors"
	"io"
)

// ErrBuildFailed: the engine ran the build and it failed (a step exited
// non-zero, a base image is missing, the Dockerfile is wrong). The wrapped
// message is the engine's, for the user's build log.
var ErrBuildFailed = errors.New("image build failed")

// ErrBuildImageVanished: a build failed because an image it was using went
// away mid-build. The classic builder reuses the untagged images of earlier
// builds as its layer cache, and removing any template's image prunes its
// untagged parents, which another build (of this daemon or of another on
// the same engine) may be reusing at that moment. The definition is not at
// fault: the same build run again succeeds. Such an error wraps both this
// and ErrBuildFailed.
var ErrBuildImageVanished = errors.New("an image the build was using was removed")

// LabelTemplateBuild marks an image with the template build that made it,
// so the janitor can match images with the store after a crash.
const LabelTemplateBuild = "sandpit.template-build"

// Labels an image carries to say what runs when a sandbox of it starts, the
// way E2B's templates have a start and a ready command: the daemon launches
// the start command in the background after the container starts (again
// after every restart) and answers the create once the ready command
// succeeds. The code-interpreter image uses them for its server; any image
// may, and images committed from such a container (snapshots, forks) keep
// them.
const (
	LabelStartCmd = "org.sandpit.start-cmd"
	LabelReadyCmd = "org.sandpit.ready-cmd"
)

// BuildSpec is one image build.
type BuildSpec struct {
	// Context is a tar stream of the build context; Dockerfile is the path
	// of the Dockerfile inside it.
	Context    io.Reader
	Dockerfile string
	// Tag is given to the image only when the build succeeds, so a failed
	// build leaves nothing tagged.
	Tag     string
	Labels  map[string]string
	NoCache bool
	// CacheFrom are the only images whose layers the build may reuse as
	// its cache: an owner's own images, so that a cache hit never says
	// that another owner ran the same step. An empty list (with NoCache
	// unset) reuses nothing either.
	CacheFrom []string
	// Limits bound every step's container the way a sandbox is bounded.
	Limits BuildLimits
}

// BuildLimits are a build step's resources.
type BuildLimits struct {
	CPU       float64 // cores; 0 = no limit
	MemoryMB  int64   // 0 = no limit
	PidsLimit int64   // 0 = no limit
	// Isolated runs the steps on the sandboxes' network, where the
	// daemon's firewall keeps them from the host and from other
	// sandboxes, rather than on the engine's default bridge.
	Isolated bool
}

// Images builds, moves and removes the images templates run. driver/docker
// is the implementation; it is separate from Driver because builds are
// long, streamed operations the engine-call time limit must not cut.
type Images interface {
	// Build runs the build, writing its log lines to logs, and returns the
	// image id. A failing build's error wraps ErrBuildFailed.
	Build(ctx context.Context, spec BuildSpec, logs io.Writer) (string, error)
	HasImage(ctx context.Context, ref string) (bool, error)
	// ImageLabels are the labels of ref's configuration (LabelStartCmd and
	// the like); a missing image wraps ErrImageNotFound.
	ImageLabels(ctx context.Context, ref string) (map[string]string, error)
	// RemoveImage untags and removes ref; a missing image is not an error.
	RemoveImage(ctx context.Context, ref string) error
	// Commit makes an image of the container's filesystem, tagged ref and
	// carrying labels, and returns its id. A running container is frozen
	// for the commit, so what is written mid-commit is not half in it.
	Commit(ctx context.Context, containerID, ref string, labels map[string]string) (string, error)
	// Push sends ref to the registry its name points at; Pull fetches it.
	Push(ctx context.Context, ref string, logs io.Writer) error
	Pull(ctx context.Context, ref string, logs io.Writer) error
	// ListImages lists the images carrying every one of labels, so the
	// janitor can match what the engine holds against the store.
	ListImages(ctx context.Context, labels map[string]string) ([]Image, error)
}

// Image is one image the engine holds.
type Image struct {
	ID     string
	Tags   []string
	Labels map[string]string
}
