package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
)

// maxPendingEvents bounds what a polling watcher keeps between two
// GetWatcherEvents calls, so an abandoned watcher on a busy directory cannot
// eat the sandbox's memory.
const maxPendingEvents = 10000

// dirWatcher turns fsnotify events under one directory into protocol events.
// Only one goroutine may call convert.
type dirWatcher struct {
	fsw          *fsnotify.Watcher
	root         string
	recursive    bool
	includeEntry bool
	owners       *ownerCache
	log          *slog.Logger
}

func newDirWatcher(root string, recursive, includeEntry bool, as accounts, log *slog.Logger) (*dirWatcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("create watcher: %w", err)
	}
	w := &dirWatcher{
		fsw:          fsw,
		root:         root,
		recursive:    recursive,
		includeEntry: includeEntry,
		owners:       newOwnerCache(as),
		log:          log.With("watch", root),
	}
	if err := w.add(root); err != nil {
		_ = fsw.Close()
		return nil, err
	}
	return w, nil
}

// add watches dir and, for a recursive watcher, every directory below it.
// Unreadable subdirectories are skipped rather than failing the whole watch.
func (w *dirWatcher) add(dir string) error {
	if !w.recursive {
		if err := w.fsw.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return fmt.Errorf("watch %s: %w", p, err)
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if err := w.fsw.Add(p); err != nil {
			if p == dir {
				return fmt.Errorf("watch %s: %w", p, err)
			}
			w.log.Debug("watch subdirectory", "path", p, "err", err)
		}
		return nil
	})
}

func (w *dirWatcher) close() {
	_ = w.fsw.Close()
}

// eventTypes splits an fsnotify operation set into protocol event types: one
// fsnotify event may carry several operations, and each becomes its own
// protocol event.
func eventTypes(op fsnotify.Op) []fspb.EventType {
	var types []fspb.EventType
	for _, ot := range []struct {
		op  fsnotify.Op
		typ fspb.EventType
	}{
		{fsnotify.Create, fspb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Write, fspb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, fspb.EventType_EVENT_TYPE_REMOVE},
		{fsnotify.Rename, fspb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, fspb.EventType_EVENT_TYPE_CHMOD},
	} {
		if op.Has(ot.op) {
			types = append(types, ot.typ)
		}
	}
	return types
}

// uploadTempMarker sits between the destination's name and the random
// digits in the name of an upload's temporary file (writeOne).
const uploadTempMarker = ".upload-"

// isUploadTemp reports whether a path names an upload's temporary file:
// ".<name>.upload-<digits>". Watchers do not report them: envd writes in
// place, so an E2B client watching a directory knows only the files it
// wrote, and one waiting for a WRITE of a file must not be shown another
// name. The name is matched rather than looked up among uploads in flight
// because events arrive after the upload that caused them may have ended.
func isUploadTemp(path string) bool {
	base := filepath.Base(path)
	i := strings.LastIndex(base, uploadTempMarker)
	if i < 2 || base[0] != '.' {
		return false
	}
	digits := base[i+len(uploadTempMarker):]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// convert translates one fsnotify event. Names are relative to the watched
// directory. A directory created under a recursive watch is watched too.
// An upload's temporary file yields no event.
func (w *dirWatcher) convert(ev fsnotify.Event) []*fspb.FilesystemEvent {
	if isUploadTemp(ev.Name) {
		return nil
	}
	name, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	if w.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := w.add(ev.Name); err != nil {
				w.log.Debug("watch new directory", "path", ev.Name, "err", err)
			}
		}
	}
	var entry *fspb.EntryInfo
	if w.includeEntry && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		// The entry may already be gone again; the event is still worth
		// reporting without it.
		entry, _ = w.owners.entry(ev.Name)
	}
	var out []*fspb.FilesystemEvent
	for _, typ := range eventTypes(ev.Op) {
		out = append(out, &fspb.FilesystemEvent{Name: name, Type: typ, Entry: entry})
	}
	return out
}

// watchRoot resolves and checks the directory a watch request names.
func (a *agent) watchRoot(ctx context.Context, p string) (string, error) {
	root := a.resolvePath(ctx, p)
	fi, err := os.Stat(root)
	if err != nil {
		return "", fsError(err)
	}
	if !fi.IsDir() {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", root))
	}
	return root, nil
}

// WatchDir streams the changes under a directory: a start event once the
// watch is in place, then filesystem events, with keepalives in between. The
// stream's deadline ends the watch normally rather than as an error, since
// E2B clients use it as the watch's duration.
func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	root, err := s.a.watchRoot(ctx, req.Msg.GetPath())
	if err != nil {
		return err
	}
	var w *dirWatcher
	// Only the directories watched from the start are opened as the
	// request's account; ones that appear later are added by the agent.
	err = s.a.account(ctx).as(func() (err error) {
		w, err = newDirWatcher(root, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), s.a.accounts, s.a.log)
		return err
	})
	if err != nil {
		return fsError(err)
	}
	defer w.close()

	start := &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return fmt.Errorf("send start event: %w", err)
	}
	keepalive := s.a.keepaliveFor(req.Header())
	timer := time.NewTimer(keepalive)
	defer timer.Stop()
	errs := w.fsw.Errors
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return nil
			}
			for _, fe := range w.convert(ev) {
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
					return fmt.Errorf("send filesystem event: %w", err)
				}
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.log.Warn("watch error", "err", err)
		case <-timer.C:
			ka := &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}
			if err := stream.Send(ka); err != nil {
				return fmt.Errorf("send keepalive: %w", err)
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		timer.Reset(keepalive)
	}
}

// watcherRegistry holds the watchers created with CreateWatcher.
type watcherRegistry struct {
	mu       sync.Mutex
	watchers map[string]*pollWatcher
}

func newWatcherRegistry() *watcherRegistry {
	return &watcherRegistry{watchers: map[string]*pollWatcher{}}
}

// pollWatcher collects events until a client fetches them.
type pollWatcher struct {
	w       *dirWatcher
	mu      sync.Mutex
	pending []*fspb.FilesystemEvent
	dropped int
}

// collect buffers events until the watcher is closed.
func (pw *pollWatcher) collect() {
	events, errs := pw.w.fsw.Events, pw.w.fsw.Errors
	for events != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			converted := pw.w.convert(ev)
			pw.mu.Lock()
			for _, fe := range converted {
				if len(pw.pending) >= maxPendingEvents {
					pw.dropped++
					continue
				}
				pw.pending = append(pw.pending, fe)
			}
			pw.mu.Unlock()
		case err, ok := <-errs:
			// The error channel must be drained too, or fsnotify blocks.
			if !ok {
				errs = nil
				continue
			}
			pw.w.log.Warn("watch error", "err", err)
		}
	}
}

// CreateWatcher starts a watch whose events are fetched with
// GetWatcherEvents, for clients that cannot hold a stream open.
func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	root, err := s.a.watchRoot(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var w *dirWatcher
	// Only the directories watched from the start are opened as the
	// request's account; ones that appear later are added by the agent.
	err = s.a.account(ctx).as(func() (err error) {
		w, err = newDirWatcher(root, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), s.a.accounts, s.a.log)
		return err
	})
	if err != nil {
		return nil, fsError(err)
	}
	pw := &pollWatcher{w: w}
	go pw.collect()
	id := rand.Text()
	reg := s.a.watchers
	reg.mu.Lock()
	reg.watchers[id] = pw
	reg.mu.Unlock()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and forgets the events collected since the last
// call.
func (s *filesystemService) GetWatcherEvents(_ context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	pw, err := s.a.watchers.get(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	events, dropped := pw.pending, pw.dropped
	pw.pending, pw.dropped = nil, 0
	pw.mu.Unlock()
	if dropped > 0 {
		pw.w.log.Warn("watcher dropped events between polls", "dropped", dropped)
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a watcher created with CreateWatcher.
func (s *filesystemService) RemoveWatcher(_ context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	reg := s.a.watchers
	reg.mu.Lock()
	pw, ok := reg.watchers[req.Msg.GetWatcherId()]
	delete(reg.watchers, req.Msg.GetWatcherId())
	reg.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.GetWatcherId()))
	}
	pw.w.close()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}

func (r *watcherRegistry) get(id string) (*pollWatcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pw, ok := r.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return pw, nil
}
