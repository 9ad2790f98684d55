package templates

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// archiveEntry is one entry of a test archive: a file (body), a directory
// (name ending in "/"), a symlink ("-> target") or a hard link ("=> name").
type archiveEntry struct{ name, body string }

func writeArchive(t *testing.T, dir, hash string, entries []archiveEntry) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		body := e.body
		switch {
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Mode, h.Size, body = tar.TypeDir, 0o755, 0, ""
		case strings.HasPrefix(e.body, "-> "):
			h.Typeflag, h.Linkname, h.Size, body = tar.TypeSymlink, strings.TrimPrefix(e.body, "-> "), 0, ""
		case strings.HasPrefix(e.body, "=> "):
			h.Typeflag, h.Linkname, h.Size, body = tar.TypeLink, strings.TrimPrefix(e.body, "=> "), 0, ""
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, hash), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readContext lists a context's entries as archiveEntry values, in order.
func readContext(t *testing.T, ctx []byte) []archiveEntry {
	t.Helper()
	var out []archiveEntry
	tr := tar.NewReader(bytes.NewReader(ctx))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		e := archiveEntry{name: h.Name, body: string(b)}
		switch h.Typeflag {
		case tar.TypeSymlink:
			e.body = "-> " + h.Linkname
		case tar.TypeLink:
			e.body = "=> " + h.Linkname
		}
		out = append(out, e)
	}
}

// TestWriteContextSelects checks where a build context places an archive's
// entries for each kind of selection E2B's COPY steps make, and that
// symlinks are placed as they are (without what the archive holds beneath
// one) while hard links follow their targets.
func TestWriteContextSelects(t *testing.T) {
	const hash = "0123456789abcdef"
	archive := []archiveEntry{
		{"folder/test.txt", "test"},
		{"folder/symlink.txt", "-> test.txt"},
		{"folder/abs.txt", "-> /etc/passwd"},
		{"folder/hard.txt", "=> folder/test.txt"},
		{"folder/sub/", ""},
		{"folder/sub/b.txt", "bee"},
		{"folder/linkdir", "-> /somewhere"},
		{"folder/linkdir/secret.txt", "reached through the link"},
	}
	tests := []struct {
		name  string
		files ContextFiles
		want  []archiveEntry
	}{
		{
			name:  "no selection: every entry under the prefix",
			files: ContextFiles{Prefix: "p", Hash: hash},
			want: []archiveEntry{
				{"p/folder/test.txt", "test"}, {"p/folder/symlink.txt", "-> test.txt"}, {"p/folder/abs.txt", "-> /etc/passwd"},
				{"p/folder/hard.txt", "=> p/folder/test.txt"}, {"p/folder/sub/", ""}, {"p/folder/sub/b.txt", "bee"}, {"p/folder/linkdir", "-> /somewhere"},
			},
		},
		{
			name:  "a directory renamed: its contents under the new name",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: "folder", As: "dest"},
			want: []archiveEntry{
				{"p/", ""}, {"p/dest/test.txt", "test"}, {"p/dest/symlink.txt", "-> test.txt"}, {"p/dest/abs.txt", "-> /etc/passwd"},
				{"p/dest/hard.txt", "=> p/dest/test.txt"}, {"p/dest/sub/", ""}, {"p/dest/sub/b.txt", "bee"}, {"p/dest/linkdir", "-> /somewhere"},
			},
		},
		{
			name:  "a directory's contents at the prefix",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: "folder/sub"},
			want:  []archiveEntry{{"p/", ""}, {"p/b.txt", "bee"}},
		},
		{
			name:  "one symlink renamed stays a symlink",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: "folder/symlink.txt", As: "link"},
			want:  []archiveEntry{{"p/", ""}, {"p/link", "-> test.txt"}},
		},
		{
			name:  "a symlink to a directory: the link, not what the archive holds beneath it",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: "folder/linkdir", As: "d"},
			want:  []archiveEntry{{"p/", ""}, {"p/d", "-> /somewhere"}},
		},
		{
			name:  "one file under its own name",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: "folder/test.txt"},
			want:  []archiveEntry{{"p/", ""}, {"p/test.txt", "test"}},
		},
		{
			name:  "the whole archive renamed",
			files: ContextFiles{Prefix: "p", Hash: hash, Select: ".", As: "all"},
			want: []archiveEntry{
				{"p/", ""}, {"p/all/folder/test.txt", "test"}, {"p/all/folder/symlink.txt", "-> test.txt"}, {"p/all/folder/abs.txt", "-> /etc/passwd"},
				{"p/all/folder/hard.txt", "=> p/all/folder/test.txt"}, {"p/all/folder/sub/", ""}, {"p/all/folder/sub/b.txt", "bee"}, {"p/all/folder/linkdir", "-> /somewhere"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeArchive(t, dir, hash, archive)
			var ctx bytes.Buffer
			if err := (&Service{}).writeContext(&ctx, dir, BuildDefinition{Dockerfile: "FROM x\n", Files: []ContextFiles{tt.files}}); err != nil {
				t.Fatal(err)
			}
			got := readContext(t, ctx.Bytes())
			if got[0].name != buildDockerfile {
				t.Fatalf("the context starts with %q", got[0].name)
			}
			if !slices.Equal(got[1:], tt.want) {
				t.Errorf("context:\n%v\nwant:\n%v", got[1:], tt.want)
			}
		})
	}
}

// TestWriteContextRefusesLinksOut checks that an archive whose names or
// hard links leave what it places is refused, and nothing is written for
// it.
func TestWriteContextRefusesLinksOut(t *testing.T) {
	const hash = "0123456789abcdef"
	tests := []struct {
		name    string
		entries []archiveEntry
		files   ContextFiles
	}{
		{"a name leaving the context", []archiveEntry{{"../x", "x"}}, ContextFiles{Hash: hash}},
		{"a hard link leaving the context", []archiveEntry{{"a", "=> ../../etc/passwd"}}, ContextFiles{Hash: hash}},
		{"a hard link to the Dockerfile", []archiveEntry{{"a", "=> /" + buildDockerfile}}, ContextFiles{Hash: hash}},
		{"a hard link to an entry not selected", []archiveEntry{{"b.txt", "b"}, {"dir/a", "=> b.txt"}}, ContextFiles{Hash: hash, Select: "dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeArchive(t, dir, hash, tt.entries)
			err := (&Service{}).writeContext(io.Discard, dir, BuildDefinition{Dockerfile: "FROM x\n", Files: []ContextFiles{tt.files}})
			if !errors.Is(err, sandpit.ErrInvalid) {
				t.Fatalf("err = %v, want sandpit.ErrInvalid", err)
			}
		})
	}
}
