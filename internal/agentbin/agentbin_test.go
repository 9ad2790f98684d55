package agentbin

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/fstest"
)

// TestInstallWithoutAgent: a plain go build (as `go test` is) embeds only
// the README, and Install says so without writing anything.
func TestInstallWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	path, ok, err := Install(dir)
	if err != nil || ok || path != "" {
		t.Fatalf("Install without an embedded agent = %q %v %v, want \"\" false nil", path, ok, err)
	}
	if _, ok := Embedded(); ok {
		t.Error("Embedded reports an agent in a build without one")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Install wrote %v", entries)
	}
}

func TestInstall(t *testing.T) {
	agent := func(body string) fstest.MapFS {
		return fstest.MapFS{EmbedPath: {Data: append([]byte("\x7fELF"), body...)}}
	}
	inode := func(t *testing.T, path string) uint64 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v, want 0755", path, st.Mode().Perm())
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	dir := t.TempDir()
	path, ok, err := install(dir, agent("one"))
	if err != nil || !ok || path != filepath.Join(dir, FileName) {
		t.Fatalf("install = %q %v %v", path, ok, err)
	}
	first := inode(t, path)

	// The same agent again (a daemon restart) keeps the file.
	if _, _, err := install(dir, agent("one")); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) != first {
		t.Error("installing the same agent again replaced the file")
	}

	// Another agent (an upgrade) replaces it by a rename: a container still
	// running the old file keeps its inode.
	if _, _, err := install(dir, agent("two")); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) == first {
		t.Error("a different agent was written over the old file in place")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("\x7fELFtwo")) {
		t.Errorf("installed %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("install left %v behind", entries)
	}

	// Something that is no executable is never mounted as PID 1.
	if _, ok, err := install(t.TempDir(), fstest.MapFS{EmbedPath: {Data: []byte("#!/bin/sh\n")}}); err == nil || ok {
		t.Errorf("install of a non-ELF file = %v %v, want an error", ok, err)
	}
}
