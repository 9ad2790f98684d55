package client

import (
	"context"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
)

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Type is file, dir or symlink.
	Type     string    `json:"type"`
	Size     int64     `json:"size"`
	Mode     uint32    `json:"mode"`
	Modified time.Time `json:"modified"`
	// SymlinkTarget is the path a symbolic link resolves to.
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

// ListDir lists the entries under a directory of the sandbox, depth levels
// down (0 or 1: its own entries), through the agent protocol the daemon
// proxies.
func (c *Client) ListDir(ctx context.Context, id, path string, depth int) ([]FileEntry, error) {
	fc := filesystemconnect.NewFilesystemClient(daemonErrors{c.http}, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/agent", connect.WithProtoJSON())
	req := connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: uint32(max(depth, 0))})
	c.authed(req)
	resp, err := fc.ListDir(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]FileEntry, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		fe := FileEntry{Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: e.GetMode(), SymlinkTarget: e.GetSymlinkTarget()}
		fe.Type = strings.ToLower(strings.TrimPrefix(e.GetType().String(), "FILE_TYPE_"))
		if fe.Type == "directory" {
			fe.Type = "dir"
		}
		if t := e.GetModifiedTime(); t != nil {
			fe.Modified = t.AsTime()
		}
		out = append(out, fe)
	}
	return out, nil
}
