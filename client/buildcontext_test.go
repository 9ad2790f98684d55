package client

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestTarContext: the archive keeps symlinks as links (relative and
// absolute, dangling ones too), leaves out what .dockerignore excludes
// (with '!' bringing a file back), and is the same bytes for the same
// files, so a rebuild uploads under the same hash.
func TestTarContext(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Dockerfile", "FROM scratch\n")
	write("app/main.sh", "echo hi\n")
	write("app/debug.log", "noise\n")
	write("secrets/key", "k\n")
	write("logs/a.log", "a\n")
	write("logs/keep.log", "keep\n")
	write(".dockerignore", "# comment\n/secrets\n**/*.log\n!logs/keep.log\n")
	for link, target := range map[string]string{"app/rel": "main.sh", "abs": "/etc/hostname", "dangling": "missing"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}

	a, err := TarContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeSymlink:
			got[h.Name] = "-> " + h.Linkname
		case tar.TypeDir:
			got[h.Name] = "dir"
		default:
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
		}
	}
	want := map[string]string{
		".dockerignore": "# comment\n/secrets\n**/*.log\n!logs/keep.log\n", "Dockerfile": "FROM scratch\n",
		"abs": "-> /etc/hostname", "dangling": "-> missing",
		"app/": "dir", "app/main.sh": "echo hi\n", "app/rel": "-> main.sh",
		"logs/": "dir", "logs/keep.log": "keep\n",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("archive holds\n%v\nwant\n%v", got, want)
	}
	b, err := TarContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	if FilesHash(a) != FilesHash(b) {
		t.Fatal("two archives of the same directory differ")
	}
}
