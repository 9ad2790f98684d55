package agent

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// File metadata (E2B's string map on an entry) is stored with the file, in
// extended attributes of the user namespace, one attribute per key. It thus
// survives an agent restart and follows the file through renames, and a
// copy made with `cp --preserve=xattr` keeps it.

const (
	// metadataHeaderPrefix starts each header that carries one metadata
	// entry on upload: X-Metadata-<key>: <value>.
	metadataHeaderPrefix = "X-Metadata-"
	// metadataXattrPrefix starts the extended attribute of each key: E2B's
	// namespace, so that what code in the sandbox sets with
	// os.setxattr("user.e2b.<key>") is the file's metadata, as on E2B.
	metadataXattrPrefix = "user.e2b."
	// legacyXattrPrefix is where earlier agents kept metadata; it is still
	// read (and cleared on a rewrite), so files written then keep theirs.
	legacyXattrPrefix = "user.sandpit.meta."
	// maxMetadataKeys bounds how many keys one upload may set.
	maxMetadataKeys = 64
	// maxMetadataBytes bounds one value; ext4 keeps all of a file's
	// attributes in one block, so they must stay small.
	maxMetadataBytes = 1024
	// maxXattrName is Linux's limit on an attribute name (XATTR_NAME_MAX).
	maxXattrName = 255
)

// errBadMetadata: the upload's metadata headers are unusable.
var errBadMetadata = errors.New("invalid file metadata")

// metadataFromHeaders collects the X-Metadata-* headers. HTTP header names
// are case-insensitive and arrive in whatever case the client's library
// chose (Node's fetch lowercases them), so keys are stored lowercased.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	var md map[string]string
	for name, values := range h {
		if len(name) <= len(metadataHeaderPrefix) || !strings.EqualFold(name[:len(metadataHeaderPrefix)], metadataHeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(metadataHeaderPrefix):])
		if len(values) != 1 {
			return nil, fmt.Errorf("%w: key %q given %d times", errBadMetadata, key, len(values))
		}
		if len(values[0]) > maxMetadataBytes || len(metadataXattrPrefix)+len(key) > maxXattrName {
			return nil, fmt.Errorf("%w: key %q or its value is too long", errBadMetadata, key)
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = values[0]
	}
	if len(md) > maxMetadataKeys {
		return nil, fmt.Errorf("%w: %d keys, at most %d", errBadMetadata, len(md), maxMetadataKeys)
	}
	return md, nil
}

// setMetadata replaces the metadata of path with md.
func setMetadata(path string, md map[string]string) error {
	old, err := readMetadata(path)
	if err != nil {
		return err
	}
	for k := range old {
		for _, prefix := range []string{legacyXattrPrefix, metadataXattrPrefix} {
			if _, keep := md[k]; keep && prefix == metadataXattrPrefix {
				continue
			}
			if err := unix.Lremovexattr(path, prefix+k); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("remove metadata %q of %s: %w", k, path, err)
			}
		}
	}
	for k, v := range md {
		if err := unix.Lsetxattr(path, metadataXattrPrefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("store metadata %q of %s (the filesystem needs user extended attributes): %w", k, path, err)
		}
	}
	return nil
}

// readMetadata returns the metadata stored with path, nil when it has none
// or its filesystem keeps no extended attributes.
func readMetadata(path string) (map[string]string, error) {
	names, err := listXattrs(path)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
			return nil, nil
		}
		return nil, fmt.Errorf("list extended attributes of %s: %w", path, err)
	}
	// The legacy names go first, so that a key in both namespaces reads
	// as E2B's.
	slices.SortStableFunc(names, func(a, b string) int {
		return cmp.Compare(bool2int(strings.HasPrefix(b, legacyXattrPrefix)), bool2int(strings.HasPrefix(a, legacyXattrPrefix)))
	})
	var md map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok {
			key, ok = strings.CutPrefix(name, legacyXattrPrefix)
		}
		if !ok || key == "" {
			continue
		}
		val, err := getXattr(path, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read metadata %q of %s: %w", key, path, err)
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = val
	}
	return md, nil
}

// listXattrs returns the names of path's extended attributes, retrying when
// the list grows between sizing and reading it.
func listXattrs(path string) ([]string, error) {
	for {
		n, err := unix.Llistxattr(path, nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Llistxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

func bool2int(b bool) int {
	if b {
		return 1
	}
	return 0
}

func getXattr(path, name string) (string, error) {
	for {
		n, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return "", err
		}
		buf := make([]byte, n)
		n, err = unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}
