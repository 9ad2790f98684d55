// Package crashpoint lets crash tests kill the daemon at a named point of an
// operation, to prove that a daemon dying between two side effects leaves
// nothing behind after restart. The points exist only in binaries built with
// the sandpit_crashpoints build tag, which the test harnesses use; a normal
// build compiles Hit to nothing and ignores the environment variable.
package crashpoint

// Env names the environment variable that selects the point to die at.
const Env = "SANDPIT_TEST_CRASH_POINT"

// The crash points.
const (
	AfterContainerCreate = "after-container-create"
	BeforeResponse       = "before-response"
	// AfterImageBuild: the engine built and tagged a template's image, and
	// the store does not know yet.
	AfterImageBuild = "after-image-build"
	// AfterSnapshotCommit: the engine committed a snapshot's image, and the
	// store does not know yet.
	AfterSnapshotCommit = "after-snapshot-commit"
	// AfterPauseStop: a filesystem pause stopped the container, and the
	// store still says running.
	AfterPauseStop = "after-pause-stop"
	// AfterResumeStart: the resume of a filesystem pause started the
	// container, and the store still says paused.
	AfterResumeStart = "after-resume-start"
	// AfterCheckpointWrite: runsc wrote a memory pause's checkpoint into
	// its .partial directory (the container exited), which is not yet
	// named complete, and the store still says running.
	AfterCheckpointWrite = "after-checkpoint-write"
	// AfterCheckpoint: the checkpoint is complete (its directory has its
	// final name), and the store still says running.
	AfterCheckpoint = "after-checkpoint"
	// AfterArchiveCommit: an archive committed the container's filesystem
	// to an image, and the store does not know it yet.
	AfterArchiveCommit = "after-archive-commit"
	// AfterVolumeRow: a volume's row is written (creating) and the engine
	// volume is not made yet.
	AfterVolumeRow = "after-volume-row"
	// AfterVolumeCreate: the engine volume is made and its row still says
	// creating.
	AfterVolumeCreate = "after-volume-create"
	// AfterResizeStore: a resize wrote the new limits to the store, and
	// the engine still has the old ones.
	AfterResizeStore = "after-resize-store"
)
