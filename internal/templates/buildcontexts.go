package templates

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// contextTTL is how long an uploaded build context is kept once no build
// of this process uses it: long enough for a client that uploads its files
// and then starts the build (E2B's SDK asks whether the files exist first,
// and uploads them again when they do not).
const contextTTL = time.Hour

// contextsFile lists the contexts a build used, beside its log, so that
// the template's deletion removes them with the log.
func (s *Service) contextsFile(buildID string) string {
	return filepath.Join(s.cfg.TemplateDir, "logs", buildID+".contexts")
}

// useContexts records and pins the contexts of a build for as long as it
// runs in this process; the returned func unpins them.
func (s *Service) useContexts(buildID, owner string, files []ContextFiles) func() {
	var paths, hashes []string
	for _, f := range files {
		paths = append(paths, filepath.Join(s.ownerDir(owner), f.Hash))
		hashes = append(hashes, f.Hash)
	}
	if len(hashes) > 0 {
		if err := os.WriteFile(s.contextsFile(buildID), []byte(strings.Join(hashes, "\n")+"\n"), 0o600); err != nil {
			s.log.Warn("record a build's contexts", "build", buildID, "err", err)
		}
	}
	s.builds.mu.Lock()
	if s.builds.pinned == nil {
		s.builds.pinned = map[string]int{}
	}
	for _, p := range paths {
		s.builds.pinned[p]++
	}
	s.builds.mu.Unlock()
	return func() {
		s.builds.mu.Lock()
		defer s.builds.mu.Unlock()
		for _, p := range paths {
			if s.builds.pinned[p]--; s.builds.pinned[p] <= 0 {
				delete(s.builds.pinned, p)
			}
		}
	}
}

func (s *Service) contextPinned(path string) bool {
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	return s.builds.pinned[path] > 0
}

// removeBuildFiles removes a deleted template's build log and the contexts
// its build used (those no running build uses).
func (s *Service) removeBuildFiles(owner string, b sandpit.TemplateBuild) {
	_ = os.Remove(filepath.Join(s.cfg.TemplateDir, "logs", b.ID+".jsonl"))
	data, err := os.ReadFile(s.contextsFile(b.ID))
	if err == nil {
		for _, h := range strings.Fields(string(data)) {
			if !fileHashRE.MatchString(h) {
				continue
			}
			if p := filepath.Join(s.ownerDir(owner), h); !s.contextPinned(p) {
				_ = os.Remove(p)
			}
		}
	}
	_ = os.Remove(s.contextsFile(b.ID))
}

// sweepContexts removes uploaded contexts older than contextTTL that no
// running build uses, so contexts do not pile up on the host.
func (s *Service) sweepContexts(ctx context.Context) {
	if s.cfg.TemplateDir == "" {
		return
	}
	root := filepath.Join(s.cfg.TemplateDir, "files")
	cutoff := time.Now().Add(-contextTTL)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || ctx.Err() != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.ModTime().After(cutoff) || s.contextPinned(p) {
			return nil
		}
		if err := os.Remove(p); err == nil {
			s.log.Info("janitor: removed an unused build context", "file", p, "bytes", info.Size())
		}
		return nil
	})
}

// contextUsage is the bytes of contexts an owner keeps (uploads in progress
// included).
func contextUsage(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

// checkContextQuota refuses an upload of size bytes that would take the
// owner's contexts past Config.ContextQuota. An upload under the same hash
// replaces the old file and counts only its growth.
func (s *Service) checkContextQuota(dir, hash string, size int64) error {
	if s.cfg.ContextQuota < 0 {
		return nil
	}
	used := contextUsage(dir) - size // the upload itself sits in dir already
	if info, err := os.Stat(filepath.Join(dir, hash)); err == nil {
		used -= info.Size()
	}
	if used+size > s.cfg.ContextQuota {
		return fmt.Errorf("%w: the owner's uploaded build contexts would take %d bytes, over the limit of %d (--build-context-quota-mb); delete templates or wait for unused contexts to be swept", sandpit.ErrQuotaExceeded, used+size, s.cfg.ContextQuota)
	}
	return nil
}
