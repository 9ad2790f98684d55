package sshd

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/pkg/sftp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// SFTP file contents stream between the client and the sandbox's agent;
// nothing is staged whole on the host (a sparse terabyte in a sandbox
// would otherwise become a terabyte of the host's disk).
const (
	// readChunk is how much one ranged read from the agent fetches: SFTP
	// clients ask for 32-256 KiB blocks, many at once, mostly in order.
	readChunk = 4 << 20
	// readChunks is how many fetched chunks an open file keeps, for the
	// blocks a client asks for out of order.
	readChunks = 4
	// maxPendingWrite bounds the blocks a client may write ahead of the
	// next offset the upload stream needs (SFTP lets writes arrive out of
	// order); a client further ahead is refused.
	maxPendingWrite = 32 << 20
)

// Fileread serves a file with ranged reads from the agent, a few chunks at
// a time: SFTP clients read many blocks at once and out of order.
func (f *files) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	if err := f.allowed(sandpit.ActionReadFiles); err != nil {
		return nil, err
	}
	e, err := f.stat(r.Context(), r.Filepath)
	if err != nil {
		return nil, err
	}
	return &rangedFile{f: f, path: r.Filepath, size: e.GetSize()}, nil
}

// rangedFile is a sandbox file read through ranged GETs of the agent's
// /files endpoint.
type rangedFile struct {
	f    *files
	path string
	size int64

	mu     sync.Mutex
	chunks []chunk // most recently used last
}

type chunk struct {
	off  int64
	data []byte
}

func (rf *rangedFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		if off+int64(n) >= rf.size {
			return n, io.EOF
		}
		c, err := rf.chunkAt(off + int64(n))
		if err != nil {
			return n, err
		}
		k := copy(p[n:], c.data[off+int64(n)-c.off:])
		if k == 0 {
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// chunkAt returns the fetched chunk holding off, fetching it if none does.
func (rf *rangedFile) chunkAt(off int64) (chunk, error) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for i, c := range rf.chunks {
		if off >= c.off && off < c.off+int64(len(c.data)) {
			rf.chunks = append(append(rf.chunks[:i:i], rf.chunks[i+1:]...), c)
			return c, nil
		}
	}
	start := off - off%readChunk
	data, err := rf.fetch(start, min(readChunk, rf.size-start))
	if err != nil {
		return chunk{}, err
	}
	c := chunk{off: start, data: data}
	if len(rf.chunks) == readChunks {
		rf.chunks = rf.chunks[1:]
	}
	rf.chunks = append(rf.chunks, c)
	return c, nil
}

func (rf *rangedFile) fetch(off, n int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(rf.f.ctx, http.MethodGet, rf.f.filesURL(rf.path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(agentapi.AccessTokenHeader, rf.f.agent.Token)
	req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10))
	resp, err := rf.f.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusRequestedRangeNotSatisfiable:
		// The file shrank since it was opened.
		return nil, io.EOF
	case http.StatusOK:
		if off != 0 {
			return nil, fmt.Errorf("the sandbox answered a ranged read with the whole file")
		}
	default:
		return nil, httpErr(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, n))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, io.EOF
	}
	return b, nil
}

func (rf *rangedFile) Close() error { return nil }

// Filewrite streams what the client writes to the agent in one upload,
// which the handle's close waits for, so the close answers with the
// upload's outcome. Blocks written ahead of the next offset (SFTP allows
// writes in any order) wait in memory, up to maxPendingWrite. Writing
// into an existing file without truncating it (a resumed upload) is not
// supported: it would need the file staged whole.
func (f *files) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	if err := f.allowed(sandpit.ActionWriteFiles); err != nil {
		return nil, err
	}
	pf := r.Pflags()
	if pf.Append {
		return nil, sftp.ErrSSHFxOpUnsupported
	}
	if !pf.Trunc {
		if e, err := f.stat(r.Context(), r.Filepath); err == nil && e.GetSize() > 0 {
			return nil, sftp.ErrSSHFxOpUnsupported
		}
	}
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodPost, f.filesURL(r.Filepath), pr)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(agentapi.AccessTokenHeader, f.agent.Token)
	u := &upload{f: f, pw: pw, pending: map[int64][]byte{}, done: make(chan error, 1)}
	go func() {
		resp, err := f.hc.Do(req)
		if err == nil {
			if resp.StatusCode/100 != 2 {
				err = httpErr(resp)
			}
			resp.Body.Close()
		}
		// The agent stopped reading: a writer waiting on the pipe must
		// not wait for ever.
		pr.CloseWithError(errors.Join(err, errors.New("upload ended")))
		u.done <- err
	}()
	return u, nil
}

// upload is one SFTP write handle streaming to the agent.
type upload struct {
	f  *files
	pw *io.PipeWriter

	mu          sync.Mutex
	next        int64            // the offset the stream needs next
	pending     map[int64][]byte // blocks written ahead of next
	pendingSize int
	done        chan error
	closed      bool
}

func (u *upload) WriteAt(b []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.f.maxFile > 0 && off+int64(len(b)) > u.f.maxFile {
		return 0, fmt.Errorf("the file would be larger than the daemon's upload limit of %d MiB", u.f.maxFile>>20)
	}
	switch {
	case off < u.next:
		// A block again (a client's retry) or an overlap: what the stream
		// passed cannot be rewritten.
		if off+int64(len(b)) <= u.next {
			return len(b), nil
		}
		b, off = b[u.next-off:], u.next
	case off > u.next:
		if u.pendingSize+len(b) > maxPendingWrite {
			return 0, fmt.Errorf("writes too far out of order (more than %d MiB ahead)", maxPendingWrite>>20)
		}
		u.pending[off] = append([]byte(nil), b...)
		u.pendingSize += len(b)
		return len(b), nil
	}
	if _, err := u.pw.Write(b); err != nil {
		return 0, err
	}
	u.next += int64(len(b))
	for {
		p, ok := u.pending[u.next]
		if !ok {
			return len(b), nil
		}
		delete(u.pending, u.next)
		u.pendingSize -= len(p)
		if _, err := u.pw.Write(p); err != nil {
			return 0, err
		}
		u.next += int64(len(p))
	}
}

func (u *upload) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	gap := len(u.pending) > 0
	u.mu.Unlock()
	if gap {
		// Blocks past a hole the client never wrote: the file would be
		// wrong, so the upload fails rather than ends.
		u.pw.CloseWithError(errors.New("the client left a hole in the file"))
		<-u.done
		return errors.New("the client left a hole in the file")
	}
	_ = u.pw.Close()
	return <-u.done
}
