package templates

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/identity"
)

// buildDockerfile is the Dockerfile's name in a build context. It is not
// "Dockerfile", which the user's files may well contain.
const buildDockerfile = ".sandpit.Dockerfile"

var fileHashRE = regexp.MustCompile(`^[A-Za-z0-9_-]{8,128}$`)

// writeContext writes the build context: the Dockerfile, then the entries
// of every archive under its prefix. Names that would leave the context
// (absolute, "..") are refused rather than trusted to the engine.
func (s *Service) writeContext(w io.Writer, dir string, def BuildDefinition) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: buildDockerfile, Mode: 0o644, Size: int64(len(def.Dockerfile)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, def.Dockerfile); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, f := range def.Files {
		if err := copyArchive(tw, filepath.Join(dir, f.Hash), f, seen); err != nil {
			return fmt.Errorf("context files %s: %w", f.Hash, err)
		}
	}
	return tw.Close()
}

// copyArchive writes the entries of the archive file that f selects into
// the context, renamed as f places them. A hard link names another entry
// of its archive, so its target is renamed the same way; one whose target
// is not placed (or leaves the context) is refused, since the engine would
// otherwise resolve it against whatever the context holds under that name.
// Symlinks are written as they are: the engine resolves what a build reads
// through one within the context, never on the host. Entries beneath a
// symlink of the archive are left out: E2B's SDK archives a symlink to a
// directory with the files it reaches through it (on the caller's machine),
// which the engine will not extract through the link, failing the build;
// the link alone is what the copy keeps.
func copyArchive(tw *tar.Writer, file string, f ContextFiles, seen map[string]bool) error {
	prefix := strings.Trim(path.Clean("/"+f.Prefix), "/")
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	if f.Select != "" && !seen[prefix+"/"] {
		// The step's directory exists even when what it selects is an
		// empty directory, so the COPY of it finds it.
		seen[prefix+"/"] = true
		if err := tw.WriteHeader(&tar.Header{Name: prefix + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	links := map[string]bool{}
	return eachEntry(fh, func(h *tar.Header, body io.Reader) error {
		if !insideContext(h.Name) {
			return invalidf("archive entry %q leaves the context", h.Name)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || beneathLink(links, name) {
			return nil
		}
		if h.Typeflag == tar.TypeSymlink {
			links[name] = true
		}
		name, ok := f.place(name, h.Typeflag == tar.TypeDir)
		if !ok || name == "" {
			return nil
		}
		h.Name = path.Join(prefix, name)
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			target, placed := "", insideContext(h.Linkname)
			if placed {
				target, placed = f.place(path.Clean(strings.TrimPrefix(h.Linkname, "./")), false)
			}
			if !placed || target == "" {
				return invalidf("archive entry %q is a hard link to %q, which is not among the copied files", h.Name, h.Linkname)
			}
			h.Linkname = path.Join(prefix, target)
		}
		if seen[h.Name] {
			// Two archives (two COPY steps of one directory) may hold
			// the same entry; the first stands.
			return nil
		}
		seen[h.Name] = true
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	})
}

// beneathLink reports whether one of name's parent directories is among
// links.
func beneathLink(links map[string]bool, name string) bool {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if links[d] {
			return true
		}
	}
	return false
}

// eachEntry calls fn with every entry of a tar archive, gzipped or not.
func eachEntry(r io.Reader, fn func(*tar.Header, io.Reader) error) error {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		in = gz
	}
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

func (s *Service) ownerDir(owner string) string {
	o := sha256.Sum256([]byte(owner))
	return filepath.Join(s.cfg.TemplateDir, "files", hex.EncodeToString(o[:8]))
}

// HasTemplateFiles reports whether the owner uploaded the archive.
func (s *Service) HasTemplateFiles(owner, hash string) bool {
	if !fileHashRE.MatchString(hash) || s.cfg.TemplateDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(s.ownerDir(owner), hash))
	return err == nil
}

// HasFiles reports whether the caller uploaded the archive.
func (s *Service) HasFiles(ctx context.Context, hash string) bool {
	return s.HasTemplateFiles(identity.OwnerOf(ctx), hash)
}

// PutTemplateFiles stores an archive (a tar, gzipped or not) of build
// context files for the caller under hash. An upload is idempotent: the
// same hash again replaces the file atomically. With verify, hash must be
// the SHA-256 of the bytes (the /v1 upload); E2B's hash is the SDK's own
// digest of the files and is taken as the name it is.
func (s *Service) PutTemplateFiles(ctx context.Context, hash string, r io.Reader, verify bool) error {
	if err := s.buildsReady(); err != nil {
		return err
	}
	if !fileHashRE.MatchString(hash) {
		return invalidf("invalid files hash %q", hash)
	}
	dir := s.ownerDir(identity.OwnerOf(ctx))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	limit := s.cfg.MaxContextBytes
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("upload build files: %w", err)
	}
	if n > limit {
		return fmt.Errorf("%w: over the daemon's limit of %d bytes", ErrTooLarge, limit)
	}
	if verify && hex.EncodeToString(h.Sum(nil)) != hash {
		return invalidf("the uploaded files do not hash to %s", hash)
	}
	// The quota is checked with the upload on disk, under the lock that
	// orders every owner's uploads, so two uploads cannot both fit a
	// quota that holds one.
	s.builds.uploads.Lock()
	defer s.builds.uploads.Unlock()
	if err := s.checkContextQuota(dir, hash, n); err != nil {
		return err
	}
	if err := checkArchive(tmp); err != nil {
		return invalidf("the uploaded files are not a tar archive: %v", err)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, hash))
}

// checkArchive reads the archive through, so a corrupt upload is refused
// when it arrives rather than failing a build later.
func checkArchive(f *os.File) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return eachEntry(f, func(h *tar.Header, body io.Reader) error {
		if !insideContext(h.Name) {
			return fmt.Errorf("entry %q leaves the build context", h.Name)
		}
		_, err := io.Copy(io.Discard, body)
		return err
	})
}

// insideContext reports whether an archive entry's name stays inside the
// directory it is unpacked in.
func insideContext(name string) bool {
	n := path.Clean(strings.TrimPrefix(name, "./"))
	return !path.IsAbs(n) && n != ".." && !strings.HasPrefix(n, "../")
}
