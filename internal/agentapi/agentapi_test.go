package agentapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
)

// hostileAgent answers ListDir with an entry whose name is as long as the
// test asks: an agent, which runs next to untrusted code, trying to make the
// daemon allocate without bound.
type hostileAgent struct {
	filesystemconnect.UnimplementedFilesystemHandler
	nameLen int
}

func (a *hostileAgent) ListDir(context.Context, *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	return connect.NewResponse(&fspb.ListDirResponse{Entries: []*fspb.EntryInfo{{Name: strings.Repeat("x", a.nameLen)}}}), nil
}

// TestAgentReadsAreBounded: the daemon's agent clients refuse a message over
// ReadMaxBytes and take one under it.
func TestAgentReadsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nameLen int
		want    connect.Code
	}{
		{"small answer", 1 << 10, 0},
		{"answer over the limit", ReadMaxBytes + 1, connect.CodeResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(filesystemconnect.NewFilesystemHandler(&hostileAgent{nameLen: tc.nameLen}))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c := NewClients(&http.Client{}, strings.TrimPrefix(srv.URL, "http://"))
			_, err := c.Filesystem.ListDir(context.Background(), connect.NewRequest(&fspb.ListDirRequest{Path: "/"}))
			if got := connect.CodeOf(err); (tc.want == 0 && err != nil) || (tc.want != 0 && got != tc.want) {
				t.Fatalf("ListDir: %v (code %v), want code %v", err, got, tc.want)
			}
		})
	}
}
