package agent

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// writtenEntry is one element of the /files upload response.
type writtenEntry struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// readFile answers GET /files?path= with the file's raw bytes. Range and
// conditional requests work, which lets clients resume large downloads.
func (a *agent) readFile(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeJSONError(w, http.StatusBadRequest, "query parameter path is required")
		return
	}
	path := a.resolvePath(r.Context(), p)
	var f *os.File
	err := a.account(r.Context()).as(func() (err error) {
		f, err = os.Open(path)
		return err
	})
	if err != nil {
		writeFileError(w, err)
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		writeFileError(w, err)
		return
	}
	if fi.IsDir() {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("%s is a directory", path))
		return
	}
	// Setting the type first stops ServeContent from sniffing the content.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": fi.Name()}))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// writeFiles answers POST (or PUT) /files. A multipart body carries one file
// per part: with ?path= the single part is written there, without it each
// part's filename is its destination. Any other body is the file itself and
// needs ?path=. Either may be gzip-compressed (Content-Encoding: gzip).
// Missing parent directories are created.
func (a *agent) writeFiles(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("path")
	md, err := metadataFromHeaders(r.Header)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("gzip body: %v", err))
			return
		}
		defer func() { _ = zr.Close() }()
		body = zr
	}

	var written []writtenEntry
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType == "multipart/form-data" {
		if params["boundary"] == "" {
			writeJSONError(w, http.StatusBadRequest, "multipart body without a boundary")
			return
		}
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("read multipart body: %v", err))
				return
			}
			name := partFilename(part)
			if part.FormName() != "file" && name == "" {
				// Not a file part (a stray form field): nothing to write.
				continue
			}
			dest := target
			if dest == "" {
				dest = name
			} else if len(written) > 0 {
				writeJSONError(w, http.StatusBadRequest, "query parameter path names one file but the body holds several")
				return
			}
			if dest == "" {
				writeJSONError(w, http.StatusBadRequest, "a file part has no filename and no path was given")
				return
			}
			entry, status, err := a.writeOne(r, dest, part, md)
			if err != nil {
				writeJSONError(w, status, err.Error())
				return
			}
			written = append(written, entry)
		}
	} else {
		if target == "" {
			writeJSONError(w, http.StatusBadRequest, "query parameter path is required for a raw body")
			return
		}
		entry, status, err := a.writeOne(r, target, body, md)
		if err != nil {
			writeJSONError(w, status, err.Error())
			return
		}
		written = append(written, entry)
	}
	if written == nil {
		writeJSONError(w, http.StatusBadRequest, "the body holds no file")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}

// partFilename returns a part's filename as sent. multipart.Part.FileName
// strips it to its base name, but E2B clients put the full destination path
// there when writing several files at once.
func partFilename(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeOne writes src to the client path dest, returning the HTTP status to
// answer with when it fails. The file and any missing parent directories are
// made as the request's account, so they belong to it and the account's
// permissions apply; an existing file keeps its mode and owner, as with
// shell redirection. The upload's metadata (none if it carries none)
// replaces the file's.
//
// The bytes first go to a temporary file beside the destination, and only
// once the whole body has arrived (past the daemon's size limit, the client
// still there) are they copied into the destination in place: an upload
// that fails or is refused part way leaves neither a partial file nor the
// directories it made, and watchers see what envd's in-place write shows
// them, a CREATE of a new file and a WRITE of the file written, never a
// rename over it. Watchers never see the temporary (isUploadTemp). Where the
// account may write the file but not its directory, or the destination is
// not a regular file (a device, a FIFO), the body is written in place as it
// arrives.
func (a *agent) writeOne(r *http.Request, dest string, src io.Reader, md map[string]string) (writtenEntry, int, error) {
	acc := a.account(r.Context())
	path := a.resolvePath(r.Context(), dest)
	var (
		f       *os.File
		target  = path // the file the bytes end up in (through a symlink)
		tmp     string // "" when writing in place as the body arrives
		madeDir []string
	)
	madeDir, err := a.makeParents(acc, filepath.Dir(path))
	if err != nil {
		err = fmt.Errorf("create parent directories of %s: %w", path, err)
		return writtenEntry{}, fileErrorStatus(err), err
	}
	openTarget := func(flag int) (*os.File, error) {
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|flag, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		return f, nil
	}
	err = acc.as(func() error {
		var err error
		if t, err := filepath.EvalSymlinks(path); err == nil {
			target = t
		}
		fi, statErr := os.Stat(target)
		if statErr == nil && !fi.Mode().IsRegular() {
			f, err = openTarget(os.O_TRUNC)
			return err
		}
		f, err = os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+uploadTempMarker+"*")
		if err != nil {
			if statErr == nil && errors.Is(err, fs.ErrPermission) {
				f, err = openTarget(os.O_TRUNC)
				return err
			}
			removeDirs(madeDir)
			return fmt.Errorf("open %s: %w", path, err)
		}
		tmp = f.Name()
		return nil
	})
	if err != nil {
		return writtenEntry{}, fileErrorStatus(err), err
	}
	_, copyErr := io.Copy(f, src)
	if tmp == "" {
		if err := errors.Join(copyErr, f.Close()); err != nil {
			return writtenEntry{}, fileErrorStatus(err), fmt.Errorf("write %s: %w", path, err)
		}
	} else {
		err := acc.as(func() error {
			defer func() { _ = os.Remove(tmp) }()
			defer func() { _ = f.Close() }()
			// A failed upload leaves nothing: the temporary goes before the
			// directories the upload made, which are empty only then.
			fail := func(err error) error {
				_ = f.Close()
				_ = os.Remove(tmp)
				removeDirs(madeDir)
				return err
			}
			if copyErr != nil {
				return fail(copyErr)
			}
			// The whole body is here: copy it into the destination, which
			// keeps its inode, mode and owner as with shell redirection.
			// The file is cut to length after the copy rather than
			// truncated before it, so that a rewrite is one modification
			// (one WRITE event) where the copy is one write.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fail(err)
			}
			out, err := openTarget(0)
			if err != nil {
				return fail(err)
			}
			n, err := io.Copy(out, f)
			if err == nil {
				if fi, statErr := out.Stat(); statErr != nil {
					err = statErr
				} else if fi.Size() > n {
					err = out.Truncate(n)
				}
			}
			return errors.Join(err, out.Close())
		})
		if err != nil {
			return writtenEntry{}, fileErrorStatus(err), fmt.Errorf("write %s: %w", path, err)
		}
	}
	var stored map[string]string
	err = acc.as(func() error {
		// The upload's metadata replaces the file's; one without any
		// leaves the file with none, as on E2B (a file written in place
		// keeps its attributes otherwise).
		if err := setMetadata(path, md); err != nil {
			return err
		}
		var err error
		stored, err = readMetadata(path)
		return err
	})
	if err != nil {
		return writtenEntry{}, fileErrorStatus(err), err
	}
	return writtenEntry{Name: filepath.Base(path), Type: "file", Path: path, Metadata: stored}, 0, nil
}

// makeParents makes the missing parent directories of a file for acc and
// returns them, deepest last. They are made as the account where it may,
// so its permissions apply; where it may not (a new directory under /, as
// E2B's tests write to /0/...), the agent makes them and gives them to the
// account, as envd does, so the account owns what it asked for. That opens
// nothing: whoever may write files as an account may as well name root.
func (a *agent) makeParents(acc account, dir string) ([]string, error) {
	var made []string
	err := acc.as(func() error {
		var err error
		made, err = mkdirAllTracked(dir)
		return err
	})
	if err == nil || !errors.Is(err, fs.ErrPermission) || os.Geteuid() != 0 || acc.UID == 0 {
		return made, err
	}
	if made, err = mkdirAllTracked(dir); err != nil {
		return nil, err
	}
	for _, d := range made {
		if err := os.Lchown(d, int(acc.UID), int(acc.GID)); err != nil {
			removeDirs(made)
			return nil, err
		}
	}
	return made, nil
}

// mkdirAllTracked is os.MkdirAll that also returns the directories it made,
// deepest last, so that a failed upload can take them away again.
func mkdirAllTracked(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, j := 0, len(missing)-1; i < j; i, j = i+1, j-1 {
		missing[i], missing[j] = missing[j], missing[i]
	}
	return missing, nil
}

// removeDirs removes the directories an upload made, deepest first; one
// that something else has filled in the meantime stays.
func removeDirs(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		if os.Remove(made[i]) != nil {
			return
		}
	}
}

// writeFileError answers with the status that matches a filesystem error.
func writeFileError(w http.ResponseWriter, err error) {
	writeJSONError(w, fileErrorStatus(err), err.Error())
}

func fileErrorStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden
	case errors.Is(err, syscall.EISDIR):
		return http.StatusBadRequest
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	default:
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
			// The client's body was cut short or corrupt.
			return http.StatusBadRequest
		}
		return http.StatusInternalServerError
	}
}
