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
// permissions apply; an existing file is truncated and keeps its mode and
// owner, as with shell redirection. Metadata, when the upload carries any,
// replaces the file's.
func (a *agent) writeOne(r *http.Request, dest string, src io.Reader, md map[string]string) (writtenEntry, int, error) {
	acc := a.account(r.Context())
	path := a.resolvePath(r.Context(), dest)
	var f *os.File
	err := acc.as(func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create parent directories of %s: %w", path, err)
		}
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return writtenEntry{}, fileErrorStatus(err), err
	}
	_, copyErr := io.Copy(f, src)
	closeErr := f.Close()
	if err := errors.Join(copyErr, closeErr); err != nil {
		return writtenEntry{}, fileErrorStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	var stored map[string]string
	err = acc.as(func() error {
		if md != nil {
			if err := setMetadata(path, md); err != nil {
				return err
			}
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
