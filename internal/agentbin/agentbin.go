// Package agentbin carries the small in-sandbox agent (cmd/sandpit-agent)
// inside the sandpit executable and installs it where sandbox containers can
// mount it, so the daemon still ships as one file while each sandbox runs a
// binary that links nothing of the daemon.
//
// The agent gets into the embedded directory only through the build:
// scripts/build.sh compiles cmd/sandpit-agent to a temporary file and lays it
// over bin/sandpit-agent with `go build -overlay`, so no binary is ever
// written into or committed to the source tree. A plain
// `go build ./cmd/sandpit` of a clean checkout embeds only bin/README.md;
// Install then reports that there is no agent and the daemon mounts its own
// executable, which runs the same agent through its agent subcommand. Either
// must be statically linked (CheckStatic), which a build with cgo is not.
package agentbin

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FileName is the agent's name in the embedded directory and in the
// directory Install writes it to.
const FileName = "sandpit-agent"

// EmbedPath is where the build lays the agent over, relative to this
// package's directory (the -overlay key scripts/build.sh writes).
const EmbedPath = "bin/" + FileName

//go:embed bin
var files embed.FS

// elfMagic starts every Linux executable; checking it keeps a stray file of
// that name from being mounted as PID 1 of every sandbox.
var elfMagic = []byte("\x7fELF")

// Embedded reports whether this build carries the agent, and its size.
func Embedded() (size int64, ok bool) {
	st, err := fs.Stat(files, EmbedPath)
	if err != nil {
		return 0, false
	}
	return st.Size(), true
}

// Install writes the embedded agent to dir/FileName, mode 0755, and returns
// its path. ok is false, with no error, when the build embeds no agent.
//
// An identical file already there is left alone; a different one (an older
// daemon's) is replaced by a rename, so containers running the old file keep
// it, and a stopped sandbox that starts again mounts the new one, as it
// would mount a replaced daemon executable.
func Install(dir string) (path string, ok bool, err error) {
	return install(dir, files)
}

// install is Install from any file system holding EmbedPath.
func install(dir string, fsys fs.FS) (path string, ok bool, err error) {
	f, err := fsys.Open(EmbedPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("agentbin: open embedded agent: %w", err)
	}
	defer func() { _ = f.Close() }()
	// The embedded bytes are read only through the file, never copied
	// whole: they stay in the executable's read-only pages, which the
	// kernel can drop, instead of the daemon's heap.
	src, ok := f.(io.ReadSeeker)
	if !ok {
		return "", false, errors.New("agentbin: embedded agent is not seekable")
	}
	magic := make([]byte, len(elfMagic))
	if _, err := io.ReadFull(src, magic); err != nil || !bytes.Equal(magic, elfMagic) {
		return "", false, errors.New("agentbin: embedded " + EmbedPath + " is not an executable")
	}
	want, err := digest(src)
	if err != nil {
		return "", false, err
	}

	path = filepath.Join(dir, FileName)
	if cur, err := os.Open(path); err == nil {
		have, derr := digest(cur)
		_ = cur.Close()
		if derr == nil && have == want {
			return path, true, nil
		}
	}
	tmp, err := os.CreateTemp(dir, "."+FileName+"-*")
	if err != nil {
		return "", false, fmt.Errorf("agentbin: install agent: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after the rename
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		_ = tmp.Close()
		return "", false, fmt.Errorf("agentbin: install agent: %w", err)
	}
	_, cerr := io.Copy(tmp, src)
	// Executable and readable by every user: the container's root need not
	// be the host's (user namespaces), and it only needs to execute it.
	merr := tmp.Chmod(0o755)
	serr := tmp.Sync()
	if err := errors.Join(cerr, merr, serr, tmp.Close()); err != nil {
		return "", false, fmt.Errorf("agentbin: install agent: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", false, fmt.Errorf("agentbin: install agent: %w", err)
	}
	return path, true, nil
}

// digest hashes r from its start.
func digest(r io.ReadSeeker) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return sum, fmt.Errorf("agentbin: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return sum, fmt.Errorf("agentbin: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// ErrDynamic is the error of an agent executable that is dynamically
// linked: it starts only in images that hold the C libraries it was linked
// against, so in a busybox or Alpine sandbox the kernel cannot even load it.
var ErrDynamic = errors.New("dynamically linked")

// CheckStatic returns an error wrapping ErrDynamic when the executable at
// path asks for a program interpreter (the dynamic loader), as a build with
// cgo does.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("agentbin: read %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is %w", path, ErrDynamic)
		}
	}
	return nil
}
