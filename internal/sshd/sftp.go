package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"time"

	"connectrpc.com/connect"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
)

// serveSFTP serves the sftp subsystem on ch (what OpenSSH's scp and sftp
// speak) over the sandbox's file operations, starting in the account's
// home directory. It returns the exit status to report.
func (s *Server) serveSFTP(ctx context.Context, id string, ch ssh.Channel) int {
	agent, err := s.be.Agent(ctx, id)
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "sandpit: sandbox %s: %v\r\n", id, err)
		return 255
	}
	h := &files{ctx: ctx, agent: agent, hc: s.be.AgentHTTP(), maxFile: s.maxFile}
	home := "/"
	if e, err := h.stat(ctx, "~"); err == nil && e.GetPath() != "" {
		home = e.GetPath()
	}
	rs := sftp.NewRequestServer(ch, sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h}, sftp.WithStartDirectory(home))
	stop := context.AfterFunc(ctx, func() { rs.Close() })
	defer stop()
	if err := rs.Serve(); err != nil && !errors.Is(err, io.EOF) {
		s.log.Debug("ssh: sftp ended", "sandbox", id, "err", err)
		return 1
	}
	return 0
}

// files are the SFTP handlers over one sandbox's agent: metadata through
// its filesystem service, contents through its /files endpoint. Every call
// acts as the sandbox's default user, as the file API does.
type files struct {
	ctx     context.Context
	agent   agentapi.Agent
	hc      *agentapi.Link
	maxFile int64
}

// allowed checks the login's right for an action on files.
func (f *files) allowed(a sandpit.Action) error {
	if p, _ := sandpit.PrincipalFrom(f.ctx); !p.May(a) {
		return sftp.ErrSSHFxPermissionDenied
	}
	return nil
}

// fileErr maps an agent failure onto SFTP's status codes, so that the
// client says "No such file" rather than "Failure".
func fileErr(err error) error {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		switch cerr.Code() {
		case connect.CodeNotFound:
			return sftp.ErrSSHFxNoSuchFile
		case connect.CodePermissionDenied:
			return sftp.ErrSSHFxPermissionDenied
		}
		return errors.New(cerr.Message())
	}
	return err
}

func httpErr(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusNotFound:
		return sftp.ErrSSHFxNoSuchFile
	case http.StatusForbidden:
		return sftp.ErrSSHFxPermissionDenied
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return fmt.Errorf("sandbox answered %s: %s", resp.Status, b)
}

func (f *files) stat(ctx context.Context, p string) (*fspb.EntryInfo, error) {
	res, err := f.agent.Filesystem.Stat(ctx, agentapi.NewRequest(&fspb.StatRequest{Path: p}, f.agent.Token))
	if err != nil {
		return nil, fileErr(err)
	}
	return res.Msg.GetEntry(), nil
}

func (f *files) filesURL(p string) string {
	return "http://" + f.agent.Addr + agentapi.FilesPath + "?" + url.Values{"path": {p}}.Encode()
}

// Filecmd makes directories, removes, renames; attribute changes (scp -p's
// times and modes) are accepted and not applied.
func (f *files) Filecmd(r *sftp.Request) error {
	ctx, tok := r.Context(), f.agent.Token
	switch r.Method {
	case "Setstat":
		return nil
	case "Mkdir", "Remove", "Rmdir", "Rename", "PosixRename":
		if err := f.allowed(sandpit.ActionWriteFiles); err != nil {
			return err
		}
	default:
		return sftp.ErrSSHFxOpUnsupported
	}
	switch r.Method {
	case "Mkdir":
		if _, err := f.stat(ctx, r.Filepath); err == nil {
			return errors.New("the path exists")
		}
		_, err := f.agent.Filesystem.MakeDir(ctx, agentapi.NewRequest(&fspb.MakeDirRequest{Path: r.Filepath}, tok))
		return fileErr(err)
	case "Remove", "Rmdir":
		e, err := f.stat(ctx, r.Filepath)
		if err != nil {
			return err
		}
		isDir := e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY && e.SymlinkTarget == nil
		if r.Method == "Remove" && isDir {
			return errors.New("is a directory")
		}
		if r.Method == "Rmdir" {
			if !isDir {
				return errors.New("not a directory")
			}
			res, err := f.agent.Filesystem.ListDir(ctx, agentapi.NewRequest(&fspb.ListDirRequest{Path: r.Filepath, Depth: 1}, tok))
			if err != nil {
				return fileErr(err)
			}
			if len(res.Msg.GetEntries()) > 0 {
				return errors.New("directory not empty")
			}
		}
		_, err = f.agent.Filesystem.Remove(ctx, agentapi.NewRequest(&fspb.RemoveRequest{Path: r.Filepath}, tok))
		return fileErr(err)
	default: // Rename, PosixRename
		_, err := f.agent.Filesystem.Move(ctx, agentapi.NewRequest(&fspb.MoveRequest{Source: r.Filepath, Destination: r.Target}, tok))
		return fileErr(err)
	}
}

// PosixRename is rename that replaces the target, which Move does.
func (f *files) PosixRename(r *sftp.Request) error { return f.Filecmd(r) }

// Filelist lists a directory or stats one path.
func (f *files) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	if err := f.allowed(sandpit.ActionReadFiles); err != nil {
		return nil, err
	}
	ctx := r.Context()
	switch r.Method {
	case "List":
		res, err := f.agent.Filesystem.ListDir(ctx, agentapi.NewRequest(&fspb.ListDirRequest{Path: r.Filepath, Depth: 1}, f.agent.Token))
		if err != nil {
			return nil, fileErr(err)
		}
		out := make(lister, 0, len(res.Msg.GetEntries()))
		for _, e := range res.Msg.GetEntries() {
			out = append(out, info{e})
		}
		return out, nil
	case "Stat":
		e, err := f.stat(ctx, r.Filepath)
		if err != nil {
			return nil, err
		}
		return lister{info{e}}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

type lister []os.FileInfo

func (l lister) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if n < len(out) {
		return n, io.EOF
	}
	return n, nil
}

// info is an agent's entry as an os.FileInfo.
type info struct{ e *fspb.EntryInfo }

func (i info) Name() string {
	if n := i.e.GetName(); n != "" {
		return n
	}
	return path.Base(i.e.GetPath())
}
func (i info) Size() int64 { return i.e.GetSize() }
func (i info) Mode() fs.FileMode {
	m := fs.FileMode(i.e.GetMode()) & fs.ModePerm
	switch i.e.GetType() {
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		m |= fs.ModeDir
	case fspb.FileType_FILE_TYPE_SYMLINK:
		m |= fs.ModeSymlink
	}
	return m
}
func (i info) ModTime() time.Time {
	if t := i.e.GetModifiedTime(); t != nil {
		return t.AsTime()
	}
	return time.Time{}
}
func (i info) IsDir() bool { return i.Mode().IsDir() }
func (i info) Sys() any    { return nil }
