package daytona

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func TestObjectStorageToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o := newObjectStore([]byte("key"), nil, DefaultPrefix)
	o.now = func() time.Time { return now }
	tok := o.issueToken("alice")
	if owner, err := o.verifyToken(tok); err != nil || owner != "alice" {
		t.Fatalf("verify = %q, %v", owner, err)
	}
	parts := strings.Split(tok, ".")
	other := newObjectStore([]byte("another daemon"), nil, DefaultPrefix)
	other.now = o.now
	bad := map[string]string{
		"empty":             "",
		"garbage":           "not-a-token",
		"another owner":     strings.Join([]string{parts[0], "Ym9i", parts[2], parts[3]}, "."), // "bob" with alice's MAC
		"a later expiry":    strings.Join([]string{parts[0], parts[1], fmt.Sprint(now.Add(48 * time.Hour).Unix()), parts[3]}, "."),
		"a changed MAC":     strings.Join([]string{parts[0], parts[1], parts[2], parts[3][:len(parts[3])-2] + "AA"}, "."),
		"another daemon's":  other.issueToken("alice"),
		"an unknown format": "v2." + strings.Join(parts[1:], "."),
	}
	for name, tok := range bad {
		if _, err := o.verifyToken(tok); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	now = now.Add(storageTokenTTL + time.Second)
	if _, err := o.verifyToken(tok); err == nil {
		t.Error("an expired token was accepted")
	}
}

// storageEnv is the facade over a template aggregate that stores build files (in a
// t.TempDir()) with a small context limit.
func storageEnv(t *testing.T, limit int64) (*httptest.Server, *Handler, *templates.Service) {
	t.Helper()
	// The service needs an engine, like the rest of the package's tests
	// that start one: skipped without it, failed in CI.
	testenv.RequireDocker(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{
		DefaultImage: "unused", AgentBinary: agentBinary, Logger: log,
		Images: rt,
	}, st, rt, nil)
	tpl := templates.New(templates.Config{Images: rt, TemplateDir: t.TempDir(), MaxContextBytes: limit, Logger: log}, st, svc.Idempotency(), svc.Events(), svc)
	svc.UseTemplates(tpl)
	h := New(ctx, svc, api.NewAuth(svc.Identity(), testToken), Options{Logger: log, Templates: tpl})
	mux := http.NewServeMux()
	mux.Handle(DefaultPrefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, h, tpl
}

func tarOf(t *testing.T, name string, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bytes.Repeat([]byte("x"), size)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestObjectStorageMultipart drives the S3 subset as the SDK does: parts
// out of order, then complete; the archive becomes the caller's build
// files, and only the caller's.
func TestObjectStorageMultipart(t *testing.T) {
	srv, h, tpl := storageEnv(t, 64<<10)
	req, _ := http.NewRequest("GET", srv.URL+"/daytona/object-storage/push-access", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var access StorageAccess
	_ = json.NewDecoder(resp.Body).Decode(&access)
	resp.Body.Close()
	if access.SessionToken == "" || access.SessionToken == testToken || !strings.HasPrefix(access.StorageURL, srv.URL+"/daytona/") {
		t.Fatalf("push access %+v", access)
	}
	const hash = "0123456789abcdef0123456789abcdef"
	obj := access.StorageURL + "/" + access.Bucket + "/" + access.OrganizationID + "/" + hash + "/" + contextObject
	s3 := func(method, url, token string, body []byte) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		req.Header.Set("X-Amz-Security-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	tok := access.SessionToken
	list := access.StorageURL + "/" + access.Bucket + "/?list-type=2&max-keys=1&prefix=" + access.OrganizationID + "/" + hash + "/"
	if code, body, _ := s3("GET", list, tok, nil); code != 200 || !strings.Contains(body, "<KeyCount>0</KeyCount>") {
		t.Fatalf("list before: %d %s", code, body)
	}

	archive := tarOf(t, "tmp/x/data.bin", 20<<10)
	code, body, _ := s3("POST", obj+"?uploads=", tok, nil)
	var init InitiateMultipartUploadResult
	if code != 200 || xmlUnmarshal(body, &init) != nil || init.UploadID == "" {
		t.Fatalf("create upload: %d %s", code, body)
	}
	half := len(archive) / 2
	parts := map[int][]byte{1: archive[:half], 2: archive[half:]}
	etags := map[int]string{}
	for _, n := range []int{2, 1} {
		code, body, hdr := s3("PUT", fmt.Sprintf("%s?partNumber=%d&uploadId=%s&x-id=UploadPart", obj, n, init.UploadID), tok, parts[n])
		if code != 200 || hdr.Get("ETag") == "" {
			t.Fatalf("part %d: %d %s", n, code, body)
		}
		etags[n] = hdr.Get("ETag")
	}
	// A part the upload does not have is refused, and the upload stays.
	missing := fmt.Sprintf(`<CompleteMultipartUpload><Part><ETag>%s</ETag><PartNumber>1</PartNumber></Part><Part><ETag>"x"</ETag><PartNumber>3</PartNumber></Part></CompleteMultipartUpload>`, etags[1])
	if code, body, _ := s3("POST", obj+"?uploadId="+init.UploadID, tok, []byte(missing)); code != 400 || !strings.Contains(body, "InvalidPart") {
		t.Fatalf("complete with a missing part: %d %s", code, body)
	}
	// Another owner's token does not reach this owner's upload.
	otherTok := h.storage.issueToken("someone-else")
	if code, _, _ := s3("PUT", fmt.Sprintf("%s?partNumber=3&uploadId=%s", obj, init.UploadID), otherTok, []byte("x")); code != 404 {
		t.Fatalf("another owner's part: %d", code)
	}
	complete := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>%s</ETag><PartNumber>1</PartNumber></Part><Part><ETag>%s</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>`, etags[1], etags[2])
	if code, body, _ := s3("POST", obj+"?uploadId="+init.UploadID, tok, []byte(complete)); code != 200 || !strings.Contains(body, "CompleteMultipartUploadResult") {
		t.Fatalf("complete: %d %s", code, body)
	}
	if code, body, _ := s3("GET", list, tok, nil); code != 200 || !strings.Contains(body, "<Key>sandpit/"+hash+"/context.tar</Key>") {
		t.Fatalf("list after: %d %s", code, body)
	}
	admin := sandpit.WithPrincipal(context.Background(), sandpit.Principal{Owner: sandpit.AdminOwner})
	if !tpl.HasFiles(admin, hash) {
		t.Fatal("the assembled archive is not the owner's build files")
	}
	if code, body, _ := s3("GET", list, otherTok, nil); code != 200 || !strings.Contains(body, "<KeyCount>0</KeyCount>") {
		t.Fatalf("another owner lists this owner's files: %d %s", code, body)
	}

	// Bounds: a whole archive or parts over the daemon's limit.
	big := tarOf(t, "big.bin", 80<<10)
	if code, body, _ := s3("PUT", obj+"?x-id=PutObject", tok, big); code != 400 || !strings.Contains(body, "EntityTooLarge") {
		t.Fatalf("put over the limit: %d %s", code, body)
	}
	_, body, _ = s3("POST", obj+"?uploads=", tok, nil)
	_ = xmlUnmarshal(body, &init)
	if code, _, _ := s3("PUT", fmt.Sprintf("%s?partNumber=1&uploadId=%s", obj, init.UploadID), tok, big[:40<<10]); code != 200 {
		t.Fatalf("first part: %d", code)
	}
	if code, body, _ := s3("PUT", fmt.Sprintf("%s?partNumber=2&uploadId=%s", obj, init.UploadID), tok, big[40<<10:]); code != 400 || !strings.Contains(body, "EntityTooLarge") {
		t.Fatalf("parts over the limit: %d %s", code, body)
	}
	if code, _, _ := s3("DELETE", obj+"?uploadId="+init.UploadID, tok, nil); code != 204 {
		t.Fatalf("abort: %d", code)
	}
	if len(h.storage.uploads) != 0 {
		t.Fatalf("uploads left: %d", len(h.storage.uploads))
	}
}

func xmlUnmarshal(s string, v any) error { return xml.Unmarshal([]byte(s), v) }
