package client

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// TarContext archives dir as a build context: regular files, directories
// and symlinks (kept as links, whatever they point at, as docker build
// does), skipping what dir's .dockerignore excludes. The archive is
// deterministic for unchanged files (sorted, no owner names or access
// times), so the same directory uploads under the same hash and rebuilds
// from the daemon's cache.
func TarContext(dir string) ([]byte, error) {
	ign, err := readDockerignore(filepath.Join(dir, ".dockerignore"))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ign.excluded(rel) {
			if d.IsDir() && !ign.mayInclude(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices and pipes have no place in an image
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		hdr.AccessTime, hdr.ChangeTime = hdr.ModTime, hdr.ModTime
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dockerignore is the simple part of Docker's .dockerignore: one pattern a
// line (path.Match syntax, relative to the context, a leading / ignored),
// '#' comments, '!' re-including, the last matching line winning. A pattern
// that names a directory covers everything under it. '**' matches any number
// of directories.
type dockerignore []ignoreRule

type ignoreRule struct {
	pattern string
	negate  bool
}

func readDockerignore(p string) (dockerignore, error) {
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules dockerignore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, strings.TrimSpace(line[1:])
		}
		line = path.Clean(strings.Trim(filepath.ToSlash(line), "/"))
		if line == "." || line == "" {
			continue
		}
		if _, err := path.Match(line, ""); err != nil {
			return nil, fmt.Errorf("%s: bad pattern %q: %w", p, line, err)
		}
		r.pattern = line
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

// excluded reports whether rel (slash-separated) is left out of the context.
func (d dockerignore) excluded(rel string) bool {
	out := false
	for _, r := range d {
		if matchPath(r.pattern, rel) {
			out = !r.negate
		}
	}
	return out
}

// mayInclude reports whether some '!' line could bring back a path under
// the excluded directory rel, which must then be walked.
func (d dockerignore) mayInclude(rel string) bool {
	for _, r := range d {
		if r.negate && (strings.HasPrefix(r.pattern, rel+"/") || strings.Contains(r.pattern, "*")) {
			return true
		}
	}
	return false
}

// matchPath matches rel or any of its parent directories against pattern.
func matchPath(pattern, rel string) bool {
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if globMatch(pattern, p) {
			return true
		}
	}
	return false
}

// globMatch is path.Match with '**' standing for any number of path
// elements (none included).
func globMatch(pattern, name string) bool {
	if !strings.Contains(pattern, "**") {
		ok, _ := path.Match(pattern, name)
		return ok
	}
	pp, np := strings.Split(pattern, "/"), strings.Split(name, "/")
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(pp) {
			return j == len(np)
		}
		if pp[i] == "**" {
			for k := j; k <= len(np); k++ {
				if match(i+1, k) {
					return true
				}
			}
			return false
		}
		if j == len(np) {
			return false
		}
		ok, _ := path.Match(pp[i], np[j])
		return ok && match(i+1, j+1)
	}
	return match(0, 0)
}
