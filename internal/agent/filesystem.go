package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
)

// filesystemService implements filesystem.Filesystem.
type filesystemService struct {
	a *agent
}

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// Stat describes one entry; symbolic links are described, not followed.
func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	path := s.a.resolvePath(ctx, req.Msg.GetPath())
	var entry *fspb.EntryInfo
	err := s.a.account(ctx).as(func() (err error) {
		entry, err = newOwnerCache(s.a.accounts).entry(path)
		return err
	})
	if err != nil {
		return nil, fsError(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entry}), nil
}

// MakeDir creates a directory and any missing parents. An existing path is
// reported as already_exists, which E2B clients read as "not created".
func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	path := s.a.resolvePath(ctx, req.Msg.GetPath())
	var entry *fspb.EntryInfo
	err := s.a.account(ctx).as(func() (err error) {
		if fi, err := os.Lstat(path); err == nil {
			what := "directory"
			if !fi.IsDir() {
				what = "a non-directory entry"
			}
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists at %s", what, path))
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		entry, err = newOwnerCache(s.a.accounts).entry(path)
		return err
	})
	if err != nil {
		return nil, fsError(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entry}), nil
}

// Move renames source to destination, creating the destination's parents.
func (s *filesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	if req.Msg.GetSource() == "" || req.Msg.GetDestination() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("source and destination are required"))
	}
	src := s.a.resolvePath(ctx, req.Msg.GetSource())
	dst := s.a.resolvePath(ctx, req.Msg.GetDestination())
	var entry *fspb.EntryInfo
	err := s.a.account(ctx).as(func() (err error) {
		if _, err := os.Lstat(src); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		entry, err = newOwnerCache(s.a.accounts).entry(dst)
		return err
	})
	if err != nil {
		return nil, fsError(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entry}), nil
}

// ListDir lists a directory. Depth 0 or 1 gives its own entries; depth N
// also includes entries up to N-1 levels further down, each with its full
// path, a directory always followed by its contents. Symbolic links to
// directories are listed but not descended into, so a link loop cannot make
// the listing endless.
func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	root := s.a.resolvePath(ctx, req.Msg.GetPath())
	var entries []*fspb.EntryInfo
	err := s.a.account(ctx).as(func() (err error) {
		entries, err = s.listDir(ctx, root, max(int(req.Msg.GetDepth()), 1))
		return err
	})
	if err != nil {
		return nil, fsError(err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// listDir walks root down to depth levels.
func (s *filesystemService) listDir(ctx context.Context, root string, depth int) ([]*fspb.EntryInfo, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", root))
	}
	owners := newOwnerCache(s.a.accounts)
	var entries []*fspb.EntryInfo
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			if err := ctx.Err(); err != nil {
				return err
			}
			p := filepath.Join(dir, de.Name())
			entry, err := owners.entry(p)
			if errors.Is(err, fs.ErrNotExist) {
				// Removed while we were listing: not an error, just gone.
				continue
			}
			if err != nil {
				return err
			}
			entries = append(entries, entry)
			if level < depth && de.IsDir() {
				if err := walk(p, level+1); err != nil {
					// An unreadable subdirectory should not hide everything
					// else; it is listed, just not its contents.
					s.a.log.Debug("list subdirectory", "path", p, "err", err)
				}
			}
		}
		return nil
	}
	if err := walk(root, 1); err != nil {
		return nil, err
	}
	return entries, nil
}

// Remove deletes a file or a directory tree. Removing a missing path
// succeeds, as it does for E2B's own agent, so that cleanup code is
// idempotent.
func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	if req.Msg.GetPath() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("path is required"))
	}
	path := s.a.resolvePath(ctx, req.Msg.GetPath())
	if path == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	if err := s.a.account(ctx).as(func() error { return os.RemoveAll(path) }); err != nil {
		return nil, fsError(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// fsError maps a filesystem error to the Connect code E2B clients expect.
func fsError(err error) error {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce
	}
	var code connect.Code
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		code = connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		code = connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = connect.CodeResourceExhausted
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EXDEV),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		code = connect.CodeInvalidArgument
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	default:
		code = connect.CodeInternal
	}
	return connect.NewError(code, err)
}

// ownerCache names uids and gids from the sandbox's own passwd and group
// files, read at most once per cache, so that listing a large directory does
// not reread them per entry.
type ownerCache struct {
	accounts accounts
	names    *names
}

func newOwnerCache(as accounts) *ownerCache {
	return &ownerCache{accounts: as}
}

func (c *ownerCache) loaded() names {
	if c.names == nil {
		n := c.accounts.names()
		c.names = &n
	}
	return *c.names
}

// userName returns the name of uid, or the number itself when the image has
// no such user (or no /etc/passwd at all).
func (c *ownerCache) userName(uid uint32) string { return c.loaded().user(uid) }

func (c *ownerCache) groupName(gid uint32) string { return c.loaded().group(gid) }

// entry describes path without following it if it is a symbolic link. Like
// E2B's agent, a link reports the type and permission bits of its target
// (or FILE_TYPE_SYMLINK when the target is missing) and the target's path.
func (c *ownerCache) entry(path string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	e := &fspb.EntryInfo{
		Name:         fi.Name(),
		Path:         path,
		Size:         fi.Size(),
		Permissions:  permString(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if path == "/" {
		e.Name = "/"
	}
	mode := fi.Mode()
	if mode&fs.ModeSymlink != 0 {
		e.Type = fspb.FileType_FILE_TYPE_SYMLINK
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			// A dangling link: report what it points at, unresolved.
			target, _ = os.Readlink(path)
		}
		e.SymlinkTarget = &target
		if tfi, err := os.Stat(path); err == nil {
			mode = tfi.Mode()
			e.Type = fileType(mode)
		}
	} else {
		e.Type = fileType(mode)
	}
	e.Mode = uint32(mode.Perm())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = c.userName(st.Uid)
		e.Group = c.groupName(st.Gid)
	}
	md, err := readMetadata(path)
	if err != nil {
		return nil, err
	}
	e.Metadata = md
	return e, nil
}

func fileType(m fs.FileMode) fspb.FileType {
	switch {
	case m.IsDir():
		return fspb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return fspb.FileType_FILE_TYPE_SYMLINK
	default:
		// Devices, sockets and pipes are reported as files: the protocol has
		// no other type, and clients treat everything non-directory alike.
		return fspb.FileType_FILE_TYPE_FILE
	}
}

// permString renders a mode the way ls -l does ("-rw-r--r--", "drwxr-xr-x",
// "lrwxrwxrwx"). fs.FileMode.String differs for links ('L') and for setuid,
// setgid and sticky bits, which ls folds into the execute columns.
func permString(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(pos int, set bool, exec, noExec byte) {
		if !set {
			return
		}
		if b[pos] == 'x' {
			b[pos] = exec
		} else {
			b[pos] = noExec
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}
