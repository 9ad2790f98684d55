package daytona

import (
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// Object storage: before it asks for a build, the SDK uploads each of an
// Image's local files and directories (addLocalFile, addLocalDir, the COPY
// sources of a Dockerfile) as a tar to S3, at
// {organizationId}/{hash}/context.tar, with the credentials GET
// /object-storage/push-access hands out. Sandpit is that S3: the storage URL
// points back at the daemon, which serves the small subset of S3 the SDK
// calls (ListObjectsV2 to skip what is there, PutObject, and the multipart
// upload of archives from 5 MiB) and stores each archive as an uploaded
// build context of the caller's (service.PutTemplateFiles), named by the
// SDK's hash, which the build's contextHashes then name.
//
// The S3 client signs requests with SigV4 and sends no bearer token, but it
// sends the session token verbatim (x-amz-security-token): that token is
// the credential. It is an HMAC of the owner it was issued to and its
// expiry under a key of the daemon's, so that it names whose files an
// upload makes and can be neither forged nor stretched; the bearer token
// never leaves the API. The SigV4 signature itself is not checked (the
// secret it is made with is no secret: it travels with the token).

// Values handed out by push-access. The bucket is Daytona's own name for
// it, which the SDK falls back to anyway.
const (
	storageBucket    = "daytona-volume-builds"
	storageRegion    = "us-east-1"
	storageAccessKey = "sandpit"
	storageSecret    = "sandpit-signs-nothing-with-this"
	// storagePath is where the S3 subset is served, under the prefix.
	storagePath = "/object-storage/s3"
	// storageTokenTTL is how long push credentials last. The SDK asks for
	// them right before it uploads.
	storageTokenTTL = time.Hour
	// contextObject is the one object name under a hash.
	contextObject = "context.tar"
	// Bounds of multipart uploads, which are assembled on disk.
	maxUploadParts      = 10000
	maxUploadsPerOwner  = 4
	maxUploads          = 32
	uploadTTL           = time.Hour
	maxCompleteBodySize = 1 << 20
)

// objectStore is the S3 subset.
type objectStore struct {
	key    []byte
	tpl    TemplateBackend
	prefix string
	now    func() time.Time
	// dir is where multipart parts are kept until complete; "" is the
	// system's temporary directory.
	dir string

	mu      sync.Mutex
	uploads map[string]*multipartUpload
}

// multipartUpload is one upload in progress: its parts are files in dir.
type multipartUpload struct {
	owner, hash string
	dir         string
	created     time.Time
	parts       map[int]int64 // part number -> size
	etags       map[int]string
}

func newObjectStore(signKey []byte, tpl TemplateBackend, prefix string) *objectStore {
	m := hmac.New(sha256.New, signKey)
	m.Write([]byte("sandpit daytona object storage v1"))
	return &objectStore{key: m.Sum(nil), tpl: tpl, prefix: prefix, now: time.Now, uploads: map[string]*multipartUpload{}}
}

func (o *objectStore) mac(owner string, exp int64) []byte {
	m := hmac.New(sha256.New, o.key)
	m.Write([]byte(owner + "\x00" + strconv.FormatInt(exp, 10)))
	return m.Sum(nil)
}

// issueToken is a session token for owner, valid for storageTokenTTL.
func (o *objectStore) issueToken(owner string) string {
	exp := o.now().Add(storageTokenTTL).Unix()
	return "v1." + base64.RawURLEncoding.EncodeToString([]byte(owner)) + "." + strconv.FormatInt(exp, 10) + "." +
		base64.RawURLEncoding.EncodeToString(o.mac(owner, exp))
}

// errStorageToken: a session token that is missing, malformed, forged or
// expired.
var errStorageToken = errors.New("invalid or expired object storage session token")

// verifyToken returns the owner a session token was issued to.
func (o *objectStore) verifyToken(tok string) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return "", errStorageToken
	}
	owner, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	mac, err3 := base64.RawURLEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || len(owner) == 0 {
		return "", errStorageToken
	}
	if !hmac.Equal(mac, o.mac(string(owner), exp)) || o.now().Unix() > exp {
		return "", errStorageToken
	}
	return string(owner), nil
}

// StorageAccess is Daytona's StorageAccessDto.
type StorageAccess struct {
	AccessKey      string `json:"accessKey"`
	Secret         string `json:"secret"`
	SessionToken   string `json:"sessionToken"`
	StorageURL     string `json:"storageUrl"`
	OrganizationID string `json:"organizationId"`
	Bucket         string `json:"bucket"`
	Region         string `json:"region"`
}

// pushAccess answers GET /object-storage/push-access.
func (o *objectStore) pushAccess(w http.ResponseWriter, r *http.Request) {
	owner, _ := callerOwner(r.Context())
	api.WriteJSON(w, http.StatusOK, StorageAccess{
		AccessKey: storageAccessKey, Secret: storageSecret, SessionToken: o.issueToken(owner),
		StorageURL: baseURL(r) + o.prefix + storagePath, OrganizationID: organizationID,
		Bucket: storageBucket, Region: storageRegion,
	})
}

// s3Error is S3's error document.
type s3Error struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

func writeS3Error(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(s3Error{Code: code, Message: fmt.Sprintf(format, args...)})
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(v)
}

// s3Fail renders a service error as S3 does.
func s3Fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, templates.ErrTooLarge):
		writeS3Error(w, http.StatusBadRequest, "EntityTooLarge", "%v", err)
	case errors.Is(err, sandpit.ErrInvalid):
		writeS3Error(w, http.StatusBadRequest, "InvalidArgument", "%v", err)
	case errors.Is(err, templates.ErrBuildsUnavailable):
		writeS3Error(w, http.StatusNotImplemented, "NotImplemented", "%v", err)
	default:
		writeS3Error(w, http.StatusInternalServerError, "InternalError", "%v", err)
	}
}

// ListBucketResult is ListObjectsV2's answer.
type ListBucketResult struct {
	XMLName     xml.Name     `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name        string       `xml:"Name"`
	Prefix      string       `xml:"Prefix"`
	KeyCount    int          `xml:"KeyCount"`
	MaxKeys     int          `xml:"MaxKeys"`
	IsTruncated bool         `xml:"IsTruncated"`
	Contents    []listObject `xml:"Contents"`
}

type listObject struct {
	Key          string `xml:"Key"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

// InitiateMultipartUploadResult is CreateMultipartUpload's answer.
type InitiateMultipartUploadResult struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

// CompleteMultipartUpload is CompleteMultipartUpload's request body.
type CompleteMultipartUpload struct {
	Parts []struct {
		ETag       string `xml:"ETag"`
		PartNumber int    `xml:"PartNumber"`
	} `xml:"Part"`
}

// CompleteMultipartUploadResult is CompleteMultipartUpload's answer.
type CompleteMultipartUploadResult struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
	Bucket  string   `xml:"Bucket"`
	Key     string   `xml:"Key"`
	ETag    string   `xml:"ETag"`
}

// ServeHTTP serves the S3 subset at prefix+storagePath, path-style:
// /{bucket}/ for listings, /{bucket}/{org}/{hash}/context.tar for objects.
func (o *objectStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	owner, err := o.verifyToken(r.Header.Get("X-Amz-Security-Token"))
	if err != nil {
		writeS3Error(w, http.StatusForbidden, "AccessDenied", "%v: ask GET %s/object-storage/push-access for new credentials", err, o.prefix)
		return
	}
	ctx := sandpit.WithPrincipal(r.Context(), sandpit.Principal{TokenName: "daytona-object-storage", Owner: owner})
	rest := strings.TrimPrefix(r.URL.Path, o.prefix+storagePath+"/")
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket != storageBucket {
		writeS3Error(w, http.StatusNotFound, "NoSuchBucket", "the bucket is %s", storageBucket)
		return
	}
	q := r.URL.Query()
	if key == "" {
		if r.Method == http.MethodGet && q.Get("list-type") == "2" {
			o.list(ctx, w, q.Get("prefix"))
			return
		}
		writeS3Error(w, http.StatusNotImplemented, "NotImplemented", "only ListObjectsV2 is served on the bucket")
		return
	}
	hash, ok := objectHash(key)
	if !ok {
		writeS3Error(w, http.StatusBadRequest, "InvalidArgument", "objects are %s/{hash}/%s", organizationID, contextObject)
		return
	}
	switch {
	case r.Method == http.MethodPut && q.Has("uploadId"):
		o.uploadPart(w, r, owner, hash, q.Get("uploadId"), q.Get("partNumber"))
	case r.Method == http.MethodPut:
		o.putObject(ctx, w, r, hash)
	case r.Method == http.MethodPost && q.Has("uploads"):
		o.createUpload(w, owner, hash, key)
	case r.Method == http.MethodPost && q.Has("uploadId"):
		o.completeUpload(ctx, w, r, owner, hash, key, q.Get("uploadId"))
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		o.abortUpload(w, owner, hash, q.Get("uploadId"))
	case r.Method == http.MethodHead:
		if !o.tpl.HasFiles(ctx, hash) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		writeS3Error(w, http.StatusNotImplemented, "NotImplemented", "%s of an object is not served", r.Method)
	}
}

// objectHash parses {org}/{hash}/context.tar.
func objectHash(key string) (string, bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] != organizationID || parts[2] != contextObject || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// list answers ListObjectsV2 for the prefix {org}/{hash}/, the SDK's check
// for an archive it uploaded before; any other prefix lists nothing.
func (o *objectStore) list(ctx context.Context, w http.ResponseWriter, prefix string) {
	out := ListBucketResult{Name: storageBucket, Prefix: prefix, MaxKeys: 1000}
	parts := strings.Split(prefix, "/")
	if len(parts) == 3 && parts[0] == organizationID && parts[2] == "" && o.tpl.HasFiles(ctx, parts[1]) {
		out.Contents = append(out.Contents, listObject{Key: prefix + contextObject, StorageClass: "STANDARD"})
	}
	out.KeyCount = len(out.Contents)
	writeXML(w, out)
}

// putObject stores a whole archive.
func (o *objectStore) putObject(ctx context.Context, w http.ResponseWriter, r *http.Request, hash string) {
	if limit := o.tpl.Config().MaxContextBytes; limit > 0 && r.ContentLength > limit {
		writeS3Error(w, http.StatusBadRequest, "EntityTooLarge", "the archive is %d bytes; the daemon's limit is %d", r.ContentLength, limit)
		return
	}
	sum := md5.New()
	if err := o.tpl.PutTemplateFiles(ctx, hash, io.TeeReader(r.Body, sum), false); err != nil {
		s3Fail(w, err)
		return
	}
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum.Sum(nil))+`"`)
	w.WriteHeader(http.StatusOK)
}

// prune drops uploads older than uploadTTL; o.mu is held.
func (o *objectStore) prune() {
	for id, u := range o.uploads {
		if o.now().Sub(u.created) > uploadTTL {
			_ = os.RemoveAll(u.dir)
			delete(o.uploads, id)
		}
	}
}

func (o *objectStore) createUpload(w http.ResponseWriter, owner, hash, key string) {
	o.mu.Lock()
	o.prune()
	n := 0
	for _, u := range o.uploads {
		if u.owner == owner {
			n++
		}
	}
	if n >= maxUploadsPerOwner || len(o.uploads) >= maxUploads {
		o.mu.Unlock()
		writeS3Error(w, http.StatusServiceUnavailable, "SlowDown", "too many multipart uploads in progress; retry later")
		return
	}
	dir, err := os.MkdirTemp(o.dir, "sandpit-daytona-upload-")
	if err != nil {
		o.mu.Unlock()
		s3Fail(w, err)
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	o.uploads[id] = &multipartUpload{owner: owner, hash: hash, dir: dir, created: o.now(), parts: map[int]int64{}, etags: map[int]string{}}
	o.mu.Unlock()
	writeXML(w, InitiateMultipartUploadResult{Bucket: storageBucket, Key: key, UploadID: id})
}

// upload returns the caller's upload of the id for the hash.
func (o *objectStore) upload(owner, hash, id string) *multipartUpload {
	o.mu.Lock()
	defer o.mu.Unlock()
	u := o.uploads[id]
	if u == nil || u.owner != owner || u.hash != hash {
		return nil
	}
	return u
}

// uploadPart stores one part. Parts arrive concurrently and out of order;
// together they may not exceed the daemon's context limit.
func (o *objectStore) uploadPart(w http.ResponseWriter, r *http.Request, owner, hash, id, number string) {
	u := o.upload(owner, hash, id)
	if u == nil {
		writeS3Error(w, http.StatusNotFound, "NoSuchUpload", "no upload %s", id)
		return
	}
	n, err := strconv.Atoi(number)
	if err != nil || n < 1 || n > maxUploadParts {
		writeS3Error(w, http.StatusBadRequest, "InvalidArgument", "partNumber must be an integer from 1 to %d", maxUploadParts)
		return
	}
	limit := o.tpl.Config().MaxContextBytes
	f, err := os.CreateTemp(u.dir, ".part-*")
	if err != nil {
		s3Fail(w, err)
		return
	}
	defer os.Remove(f.Name())
	sum := md5.New()
	size, err := io.Copy(io.MultiWriter(f, sum), io.LimitReader(r.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s3Fail(w, err)
		return
	}
	o.mu.Lock()
	total := size
	for p, s := range u.parts {
		if p != n {
			total += s
		}
	}
	if total > limit {
		o.mu.Unlock()
		writeS3Error(w, http.StatusBadRequest, "EntityTooLarge", "the archive is over the daemon's limit of %d bytes", limit)
		return
	}
	if err := os.Rename(f.Name(), filepath.Join(u.dir, "part-"+strconv.Itoa(n))); err != nil {
		o.mu.Unlock()
		s3Fail(w, err)
		return
	}
	etag := `"` + hex.EncodeToString(sum.Sum(nil)) + `"`
	u.parts[n], u.etags[n] = size, etag
	o.mu.Unlock()
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
}

// completeUpload assembles the listed parts, in order, into the archive.
func (o *objectStore) completeUpload(ctx context.Context, w http.ResponseWriter, r *http.Request, owner, hash, key, id string) {
	u := o.upload(owner, hash, id)
	if u == nil {
		writeS3Error(w, http.StatusNotFound, "NoSuchUpload", "no upload %s", id)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCompleteBodySize))
	var req CompleteMultipartUpload
	if err == nil {
		err = xml.Unmarshal(body, &req)
	}
	if err != nil || len(req.Parts) == 0 {
		writeS3Error(w, http.StatusBadRequest, "MalformedXML", "the body must list the upload's parts")
		return
	}
	o.mu.Lock()
	var files []string
	prev := 0
	for _, p := range req.Parts {
		etag, ok := u.etags[p.PartNumber]
		if !ok || p.PartNumber <= prev || (p.ETag != "" && strings.Trim(p.ETag, `"`) != strings.Trim(etag, `"`)) {
			o.mu.Unlock()
			writeS3Error(w, http.StatusBadRequest, "InvalidPart", "part %d was not uploaded, is out of order or has another ETag", p.PartNumber)
			return
		}
		prev = p.PartNumber
		files = append(files, filepath.Join(u.dir, "part-"+strconv.Itoa(p.PartNumber)))
	}
	// The upload is taken: a concurrent complete or abort of it finds none.
	delete(o.uploads, id)
	o.mu.Unlock()
	defer os.RemoveAll(u.dir)
	var readers []io.Reader
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			s3Fail(w, err)
			return
		}
		defer f.Close()
		readers = append(readers, f)
	}
	if err := o.tpl.PutTemplateFiles(ctx, hash, io.MultiReader(readers...), false); err != nil {
		s3Fail(w, err)
		return
	}
	etags := make([]string, 0, len(req.Parts))
	for _, p := range req.Parts {
		etags = append(etags, p.ETag)
	}
	sort.Strings(etags)
	sum := md5.Sum([]byte(strings.Join(etags, "")))
	writeXML(w, CompleteMultipartUploadResult{Bucket: storageBucket, Key: key, ETag: fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(sum[:]), len(req.Parts))})
}

func (o *objectStore) abortUpload(w http.ResponseWriter, owner, hash, id string) {
	u := o.upload(owner, hash, id)
	if u != nil {
		o.mu.Lock()
		delete(o.uploads, id)
		o.mu.Unlock()
		_ = os.RemoveAll(u.dir)
	}
	w.WriteHeader(http.StatusNoContent)
}
