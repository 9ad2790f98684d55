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

// LabelTemplateBuild marks an image with the template build that made it,
// so the janitor can match images with the store after a crash.
const LabelTemplateBuild = "sandpit.template-build"

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
}

// Images builds, moves and removes the images templates run. driver/docker
// is the implementation; it is separate from Driver because builds are
// long, streamed operations the engine-call time limit must not cut.
type Images interface {
	// Build runs the build, writing its log lines to logs, and returns the
	// image id. A failing build's error wraps ErrBuildFailed.
	Build(ctx context.Context, spec BuildSpec, logs io.Writer) (string, error)
	HasImage(ctx context.Context, ref string) (bool, error)
	// RemoveImage untags and removes ref; a missing image is not an error.
	RemoveImage(ctx context.Context, ref string) error
	// Push sends ref to the registry its name points at; Pull fetches it.
	Push(ctx context.Context, ref string, logs io.Writer) error
	Pull(ctx context.Context, ref string, logs io.Writer) error
	// Commit writes a container's filesystem to an image tagged ref with
	// the given labels, and returns the image id.
	Commit(ctx context.Context, containerID, ref string, labels map[string]string) (string, error)
}
