package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
)

func (e *testEnv) postFile(t *testing.T, query string, contentType string, body io.Reader, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files"+query, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

func (e *testEnv) getFile(t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	res, err := e.http.Get(e.srv.URL + "/files?path=" + url.QueryEscape(path))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

func TestFilesBinaryRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	data := make([]byte, 5<<20)
	_, _ = rand.Read(data)
	path := filepath.Join(t.TempDir(), "nested", "dir", "blob.bin")

	res, body := e.postFile(t, "?path="+url.QueryEscape(path), "application/octet-stream", bytes.NewReader(data), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	var written []writtenEntry
	if err := json.Unmarshal(body, &written); err != nil {
		t.Fatalf("upload response %s: %v", body, err)
	}
	if want := []writtenEntry{{Name: "blob.bin", Type: "file", Path: path}}; !reflect.DeepEqual(written, want) {
		t.Fatalf("upload response %v, want %v", written, want)
	}

	res, got := e.getFile(t, path)
	if res.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download: status %d, %d bytes, equal %v", res.StatusCode, len(got), bytes.Equal(got, data))
	}

	// The same body gzip-compressed in transit.
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = zw.Write(data[:1<<20])
	_ = zw.Close()
	res, body = e.postFile(t, "?path="+url.QueryEscape(path), "application/octet-stream", &zbuf,
		http.Header{"Content-Encoding": {"gzip"}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("gzip upload: %d %s", res.StatusCode, body)
	}
	if _, got := e.getFile(t, path); !bytes.Equal(got, data[:1<<20]) {
		t.Fatal("gzip upload did not replace the file with the decompressed body")
	}
}

func TestFilesMissing(t *testing.T) {
	e := newTestEnv(t)
	res, body := e.getFile(t, filepath.Join(t.TempDir(), "missing"))
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", res.StatusCode)
	}
	var msg struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Code != 404 || msg.Message == "" {
		t.Fatalf("404 body %s (%v)", body, err)
	}
}

func TestFilesMultipart(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	files := map[string]string{
		filepath.Join(dir, "a.txt"):        "alpha",
		filepath.Join(dir, "sub", "b.txt"): "beta",
	}

	// Several files: each part's filename is its destination.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+p+`"`)
		h.Set("Content-Type", "application/octet-stream")
		w, _ := mw.CreatePart(h)
		_, _ = io.WriteString(w, files[p])
	}
	_ = mw.Close()
	res, body := e.postFile(t, "", mw.FormDataContentType(), &buf, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	var written []writtenEntry
	if err := json.Unmarshal(body, &written); err != nil || len(written) != 2 {
		t.Fatalf("upload response %s (%v)", body, err)
	}
	for p, content := range files {
		if got, err := os.ReadFile(p); err != nil || string(got) != content {
			t.Fatalf("%s = %q (%v), want %q", p, got, err, content)
		}
	}

	// One file with ?path: the path wins over the part's filename, and a
	// relative path resolves against the home directory.
	buf.Reset()
	mw = multipart.NewWriter(&buf)
	w, _ := mw.CreateFormFile("file", "blob")
	_, _ = io.WriteString(w, "gamma")
	_ = mw.Close()
	res, body = e.postFile(t, "?path=rel/c.txt", mw.FormDataContentType(), &buf, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	if err := json.Unmarshal(body, &written); err != nil || len(written) != 1 || filepath.Base(written[0].Path) != "c.txt" {
		t.Fatalf("upload response %s (%v)", body, err)
	}
	if got, err := os.ReadFile(written[0].Path); err != nil || string(got) != "gamma" {
		t.Fatalf("%s = %q (%v)", written[0].Path, got, err)
	}
}

func TestListDirDepth(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "x.txt"), "xx")
	mustWrite(t, filepath.Join(root, "a", "b", "c.txt"), "c")
	if err := os.Chmod(filepath.Join(root, "x.txt"), 0o644); err != nil {
		t.Fatal(err)
	}

	list := func(depth uint32) []*fspb.EntryInfo {
		res, err := e.fs.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: root, Depth: depth}))
		if err != nil {
			t.Fatalf("ListDir depth %d: %v", depth, err)
		}
		return res.Msg.GetEntries()
	}
	a, b, c, x := filepath.Join(root, "a"), filepath.Join(root, "a", "b"), filepath.Join(root, "a", "b", "c.txt"), filepath.Join(root, "x.txt")
	if got, want := entryPaths(list(0)), []string{a, x}; !slices.Equal(got, want) {
		t.Fatalf("depth 0: %v, want %v", got, want)
	}
	if got, want := entryPaths(list(1)), []string{a, x}; !slices.Equal(got, want) {
		t.Fatalf("depth 1: %v, want %v", got, want)
	}
	if got, want := entryPaths(list(2)), []string{a, b, x}; !slices.Equal(got, want) {
		t.Fatalf("depth 2: %v, want %v", got, want)
	}
	if got, want := entryPaths(list(3)), []string{a, b, c, x}; !slices.Equal(got, want) {
		t.Fatalf("depth 3: %v, want %v", got, want)
	}

	entries := list(1)
	dir, file := entries[0], entries[1]
	if dir.GetName() != "a" || dir.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || dir.GetPermissions()[0] != 'd' {
		t.Fatalf("directory entry %v", dir)
	}
	if file.GetName() != "x.txt" || file.GetType() != fspb.FileType_FILE_TYPE_FILE || file.GetSize() != 2 ||
		file.GetMode() != 0o644 || file.GetPermissions() != "-rw-r--r--" ||
		file.GetOwner() == "" || file.GetGroup() == "" || file.GetSymlinkTarget() != "" ||
		time.Since(file.GetModifiedTime().AsTime()) > time.Minute {
		t.Fatalf("file entry %v", file)
	}

	_, err := e.fs.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: filepath.Join(root, "nope")}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestStatMakeDirMoveRemove(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	ctx := t.Context()

	_, err := e.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(root, "missing")}))
	wantCode(t, err, connect.CodeNotFound)

	dir := filepath.Join(root, "made", "deep")
	res, err := e.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: dir}))
	if err != nil {
		t.Fatalf("MakeDir: %v", err)
	}
	if res.Msg.GetEntry().GetPath() != dir || res.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("MakeDir entry %v", res.Msg.GetEntry())
	}
	_, err = e.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: dir}))
	wantCode(t, err, connect.CodeAlreadyExists)

	src := filepath.Join(dir, "f.txt")
	mustWrite(t, src, "moved")
	dst := filepath.Join(root, "elsewhere", "g.txt")
	mv, err := e.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: src, Destination: dst}))
	if err != nil {
		t.Fatalf("Move: %v", err)
	}
	if mv.Msg.GetEntry().GetPath() != dst || mv.Msg.GetEntry().GetName() != "g.txt" {
		t.Fatalf("Move entry %v", mv.Msg.GetEntry())
	}
	if got, _ := os.ReadFile(dst); string(got) != "moved" {
		t.Fatalf("moved content %q", got)
	}
	_, err = e.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: src, Destination: dst}))
	wantCode(t, err, connect.CodeNotFound)

	link := filepath.Join(root, "link")
	if err := os.Symlink(dst, link); err != nil {
		t.Fatal(err)
	}
	st, err := e.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: link}))
	if err != nil {
		t.Fatalf("Stat link: %v", err)
	}
	if st.Msg.GetEntry().GetSymlinkTarget() != dst || st.Msg.GetEntry().GetPermissions()[0] != 'l' ||
		st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_FILE {
		t.Fatalf("link entry %v", st.Msg.GetEntry())
	}

	for _, p := range []string{filepath.Join(root, "made"), dst} {
		if _, err := e.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: p})); err != nil {
			t.Fatalf("Remove %s: %v", p, err)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still exists after Remove", p)
		}
	}
}

func TestWatchDir(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: root, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.Close() }()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event is not start: %v %v", stream.Msg(), stream.Err())
	}
	mustWrite(t, filepath.Join(root, "new.txt"), "hi")
	for stream.Receive() {
		fe := stream.Msg().GetFilesystem()
		if fe.GetName() == "new.txt" && fe.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
			if fe.GetEntry().GetPath() != filepath.Join(root, "new.txt") {
				t.Fatalf("create event entry %v", fe.GetEntry())
			}
			return
		}
	}
	t.Fatalf("no create event: %v", stream.Err())
}

func TestPollingWatcher(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	ctx := t.Context()
	created, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: root}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWatcherId()
	mustWrite(t, filepath.Join(root, "polled.txt"), "x")
	testkit.Eventually(t, 5*time.Second, "a polled create event", func() error {
		res, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(res.Msg.GetEvents(), func(fe *fspb.FilesystemEvent) bool {
			return fe.GetName() == "polled.txt" && fe.GetType() == fspb.EventType_EVENT_TYPE_CREATE
		}) {
			return fmt.Errorf("events so far: %v", res.Msg.GetEvents())
		}
		return nil
	})
	if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = e.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestPermString(t *testing.T) {
	for mode, want := range map[os.FileMode]string{
		0o644:                                 "-rw-r--r--",
		os.ModeDir | 0o755:                    "drwxr-xr-x",
		os.ModeSymlink | 0o777:                "lrwxrwxrwx",
		os.ModeSetuid | 0o755:                 "-rwsr-xr-x",
		os.ModeDir | os.ModeSticky | 0o777:    "drwxrwxrwt",
		os.ModeSetgid | 0o640:                 "-rw-r-S---",
		os.ModeNamedPipe | 0o600:              "prw-------",
		os.ModeDevice | os.ModeCharDevice | 0: "c---------",
	} {
		if got := permString(mode); got != want {
			t.Errorf("permString(%v) = %q, want %q", mode, got, want)
		}
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
