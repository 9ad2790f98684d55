package agent

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
)

// TestWatchUploadReportsTarget: an upload that rewrites a watched file, or
// writes a new one, shows watchers a WRITE of that file (and a CREATE of a
// new one) as envd's in-place write does, and never an event for any other
// name: the upload's temporary file stays hidden.
func TestWatchUploadReportsTarget(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a.txt"), "old content")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: root}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.Close() }()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event is not start: %v %v", stream.Msg(), stream.Err())
	}
	for _, name := range []string{"a.txt", "b.txt"} {
		res, body := e.postFile(t, "?path="+url.QueryEscape(filepath.Join(root, name)), "application/octet-stream", strings.NewReader("new content"), nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("upload %s: %d %s", name, res.StatusCode, body)
		}
	}
	type seen struct {
		name string
		typ  fspb.EventType
	}
	var events []seen
	for stream.Receive() {
		fe := stream.Msg().GetFilesystem()
		if fe == nil {
			continue
		}
		events = append(events, seen{fe.GetName(), fe.GetType()})
		if fe.GetName() != "a.txt" && fe.GetName() != "b.txt" {
			t.Fatalf("event for %q (%v); events %v", fe.GetName(), fe.GetType(), events)
		}
		if fe.GetName() == "b.txt" && fe.GetType() == fspb.EventType_EVENT_TYPE_WRITE {
			break
		}
	}
	for _, want := range []seen{
		{"a.txt", fspb.EventType_EVENT_TYPE_WRITE},
		{"b.txt", fspb.EventType_EVENT_TYPE_CREATE},
		{"b.txt", fspb.EventType_EVENT_TYPE_WRITE},
	} {
		if !slices.Contains(events, want) {
			t.Fatalf("no %v among %v (%v)", want, events, stream.Err())
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(events), func(s seen) bool { return s != seen{"a.txt", fspb.EventType_EVENT_TYPE_WRITE} })); n != 1 {
		t.Fatalf("a rewrite of a.txt showed %d WRITEs, want one: %v", n, events)
	}
	if slices.Contains(events, seen{"a.txt", fspb.EventType_EVENT_TYPE_CREATE}) {
		t.Fatalf("a rewrite of a.txt showed a CREATE, as a rename over it does: %v", events)
	}
}

func TestIsUploadTemp(t *testing.T) {
	for name, want := range map[string]bool{
		"/tmp/.a.txt.upload-3382170725": true,
		".x.upload-1":                   true,
		"/tmp/a.txt.upload-1":           false,
		"/tmp/.a.txt.upload-":           false,
		"/tmp/.a.txt.upload-12x":        false,
		"/tmp/a.txt":                    false,
		"/tmp/.upload-1":                false,
	} {
		if got := isUploadTemp(name); got != want {
			t.Errorf("isUploadTemp(%q) = %v, want %v", name, got, want)
		}
	}
}
