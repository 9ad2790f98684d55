package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"golang.org/x/sys/unix"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

// sandboxUsers is a passwd/group pair like a sandbox image's, in a
// directory of its own, with a home for the unprivileged user that uid 1000
// can reach.
type sandboxUsers struct {
	etc  string
	home string // alice's home
}

const aliceUID, aliceGID, extraGID = 1000, 1000, 2000

func newSandboxUsers(t *testing.T) sandboxUsers {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("switching users needs root, and CI runs as root")
		}
		t.Skip("switching users needs root")
	}
	base := t.TempDir()
	// t.TempDir makes 0700 directories; the unprivileged user must be able
	// to walk down to its home.
	for d := base; d != filepath.Dir(os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if d == os.TempDir() {
			break
		}
	}
	u := sandboxUsers{etc: filepath.Join(base, "etc"), home: filepath.Join(base, "home", "alice")}
	if err := os.MkdirAll(u.etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(u.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(u.home, aliceUID, aliceGID); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n" +
		"alice:x:1000:1000:Alice:" + u.home + ":/bin/sh\n"
	group := "root:x:0:\nalice:x:1000:\nextra:x:2000:bob,alice\n"
	if err := os.WriteFile(filepath.Join(u.etc, "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(u.etc, "group"), []byte(group), 0o644); err != nil {
		t.Fatal(err)
	}
	return u
}

// asUser returns clients that name user the way E2B SDKs do (Basic auth
// with an empty password); an empty user names nobody.
func (e *testEnv) asUser(user string) (*http.Client, processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hc := e.http
	if user != "" {
		hc = &http.Client{Transport: basicAuthTransport{user: user, base: e.http.Transport}}
	}
	return hc, processconnect.NewProcessClient(hc, e.srv.URL, connect.WithProtoJSON()),
		filesystemconnect.NewFilesystemClient(hc, e.srv.URL, connect.WithProtoJSON())
}

func TestProcessesRunAsTheRequestedUser(t *testing.T) {
	u := newSandboxUsers(t)
	rootHome := t.TempDir()
	e := newTestEnv(t, func(c *Config) {
		c.EtcDir = u.etc
		c.DefaultUser = "alice"
		c.Env["HOME"] = rootHome
	})
	const script = `echo "$(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME $SHELL $(pwd)"`
	tests := []struct {
		name, user, want string
	}{
		{"default user", "", "1000 1000 1000 2000 " + u.home + " alice alice /bin/sh " + u.home},
		{"named user", "alice", "1000 1000 1000 2000 " + u.home + " alice alice /bin/sh " + u.home},
		{"root", "root", "0 0 0 " + rootHome + " root root /bin/sh " + rootHome},
		// A name the image lacks is root, like a missing default user.
		{"unknown user", "mallory", "0 0 0 " + rootHome + " root root /bin/sh " + rootHome},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, proc, _ := e.asUser(tt.user)
			stream, err := proc.Start(t.Context(), connect.NewRequest(shell(script)))
			if err != nil {
				t.Fatal(err)
			}
			r := drain(stream)
			wantExit(t, r, 0)
			// id -G of root lists every group root is in on this host;
			// only the first (its primary group) is compared for root.
			got := strings.TrimSpace(r.stdout)
			if tt.want[0] == '0' {
				f := strings.Fields(got)
				if len(f) > 3 {
					got = strings.Join(append(f[:3], f[len(f)-5:]...), " ")
				}
			}
			if got != tt.want {
				t.Fatalf("got  %q\nwant %q (stderr %q)", got, tt.want, r.stderr)
			}
		})
	}

	// Without a default user the agent acts as root.
	plain := newTestEnv(t, func(c *Config) { c.EtcDir = u.etc; c.Env["HOME"] = rootHome })
	r := plain.run(t, shell("id -u; pwd"))
	wantExit(t, r, 0)
	if r.stdout != "0\n"+rootHome+"\n" {
		t.Fatalf("no default user: %q", r.stdout)
	}
}

func TestFilesBelongToTheRequestedUser(t *testing.T) {
	u := newSandboxUsers(t)
	e := newTestEnv(t, func(c *Config) { c.EtcDir = u.etc; c.DefaultUser = "alice" })

	owner := func(path string) (int, int) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return int(st.Uid), int(st.Gid)
	}

	// A relative path lands in the user's home; the file and the parents
	// made for it are the user's.
	res, body := e.postFile(t, "?path="+url.QueryEscape("sub/a.txt"), "application/octet-stream", strings.NewReader("hi"), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	var written []writtenEntry
	if err := json.Unmarshal(body, &written); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(u.home, "sub", "a.txt")
	if len(written) != 1 || written[0].Path != want {
		t.Fatalf("written %+v, want path %s", written, want)
	}
	for _, p := range []string{want, filepath.Dir(want)} {
		if uid, gid := owner(p); uid != aliceUID || gid != aliceGID {
			t.Fatalf("%s is %d:%d, want %d:%d", p, uid, gid, aliceUID, aliceGID)
		}
	}
	st, err := e.fs.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: "sub/a.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if en := st.Msg.GetEntry(); en.GetOwner() != "alice" || en.GetGroup() != "alice" || en.GetPermissions() != "-rw-r--r--" || en.GetMode() != 0o644 {
		t.Fatalf("stat %v", en)
	}

	// Rewriting an existing file keeps its owner, whoever writes.
	_, _, rootFS := e.asUser("root")
	hcRoot, _, _ := e.asUser("root")
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/files?path="+url.QueryEscape(want), strings.NewReader("again"))
	req.Header.Set("Content-Type", "application/octet-stream")
	if res, err := hcRoot.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("root rewrite: %v %v", res, err)
	}
	if uid, _ := owner(want); uid != aliceUID {
		t.Fatalf("rewrite by root changed the owner to %d", uid)
	}

	// MakeDir as root makes root's directory; as the default user, alice's.
	rootDir := filepath.Join(u.home, "by-root", "x")
	if _, err := rootFS.MakeDir(t.Context(), connect.NewRequest(&fspb.MakeDirRequest{Path: rootDir})); err != nil {
		t.Fatal(err)
	}
	if uid, _ := owner(rootDir); uid != 0 {
		t.Fatalf("root's directory is owned by %d", uid)
	}
	if _, err := e.fs.MakeDir(t.Context(), connect.NewRequest(&fspb.MakeDirRequest{Path: "mine/deep"})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(u.home, "mine"), filepath.Join(u.home, "mine", "deep")} {
		if uid, gid := owner(p); uid != aliceUID || gid != aliceGID {
			t.Fatalf("%s is %d:%d", p, uid, gid)
		}
	}
}

func TestFileOperationsHaveTheUsersPermissions(t *testing.T) {
	u := newSandboxUsers(t)
	e := newTestEnv(t, func(c *Config) { c.EtcDir = u.etc; c.DefaultUser = "alice" })
	hcRoot, _, rootFS := e.asUser("root")

	// Root's places, as an image has them: a directory others may enter but
	// not write, a private directory, and a private file.
	shared := filepath.Join(filepath.Dir(filepath.Dir(u.home)), "shared")
	private := filepath.Join(shared, "private")
	secret := filepath.Join(shared, "secret.txt")
	if err := os.MkdirAll(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}

	res, body := e.postFile(t, "?path="+url.QueryEscape(filepath.Join(shared, "x.txt")), "application/octet-stream", strings.NewReader("x"), nil)
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("alice writing into root's directory: %d %s", res.StatusCode, body)
	}
	if res, _ := e.getFile(t, secret); res.StatusCode != http.StatusForbidden {
		t.Fatalf("alice reading root's private file: %d", res.StatusCode)
	}
	_, err := e.fs.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(private, "x")}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = e.fs.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: private}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = e.fs.Remove(t.Context(), connect.NewRequest(&fspb.RemoveRequest{Path: secret}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = e.fs.MakeDir(t.Context(), connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(shared, "d")}))
	wantCode(t, err, connect.CodePermissionDenied)
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("the refused remove removed: %v", err)
	}

	// Root may do all of it.
	if _, err := rootFS.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: private})); err != nil {
		t.Fatalf("root: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/files?path="+url.QueryEscape(secret), nil)
	if res, err := hcRoot.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("root reading its file: %v %v", res, err)
	}
}

func TestFileMetadataIsStoredWithTheFile(t *testing.T) {
	dir := t.TempDir()
	e := newTestEnv(t)
	path := filepath.Join(dir, "meta.txt")
	md := http.Header{}
	md.Set("X-Metadata-Author", "alice")
	md.Set("x-metadata-purpose", "a test; with punctuation")
	res, body := e.postFile(t, "?path="+url.QueryEscape(path), "application/octet-stream", strings.NewReader("x"), md)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	want := map[string]string{"author": "alice", "purpose": "a test; with punctuation"}
	var written []writtenEntry
	if err := json.Unmarshal(body, &written); err != nil {
		t.Fatal(err)
	}
	if len(written) != 1 || !reflect.DeepEqual(written[0].Metadata, want) {
		t.Fatalf("write answered %+v, want metadata %v", written, want)
	}

	// A new agent (as after a restart) reads it back from the file: Stat,
	// ListDir and the watch entries all carry it.
	again := newTestEnv(t)
	st, err := again.fs.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: path}))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Msg.GetEntry().GetMetadata(); !reflect.DeepEqual(got, want) {
		t.Fatalf("stat metadata %v, want %v", got, want)
	}
	ls, err := again.fs.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ls.Msg.GetEntries()); n != 1 || !reflect.DeepEqual(ls.Msg.GetEntries()[0].GetMetadata(), want) {
		t.Fatalf("list %v", ls.Msg.GetEntries())
	}

	// Metadata follows a rename.
	moved := filepath.Join(dir, "moved.txt")
	mv, err := again.fs.Move(t.Context(), connect.NewRequest(&fspb.MoveRequest{Source: path, Destination: moved}))
	if err != nil {
		t.Fatal(err)
	}
	if got := mv.Msg.GetEntry().GetMetadata(); !reflect.DeepEqual(got, want) {
		t.Fatalf("moved metadata %v", got)
	}

	// A rewrite with new metadata replaces it; one without clears it, as
	// on E2B.
	md2 := http.Header{}
	md2.Set("X-Metadata-Author", "bob")
	res, body = again.postFile(t, "?path="+url.QueryEscape(moved), "application/octet-stream", strings.NewReader("y"), md2)
	if res.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"metadata":{"author":"bob"}`)) {
		t.Fatalf("replace: %d %s", res.StatusCode, body)
	}
	res, body = again.postFile(t, "?path="+url.QueryEscape(moved), "application/octet-stream", strings.NewReader("z"), nil)
	if res.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"metadata"`)) {
		t.Fatalf("clear: %d %s", res.StatusCode, body)
	}

	// Metadata is E2B's extended attributes: one set by code in the
	// sandbox (os.setxattr("user.e2b.<key>")) is the file's, and one an
	// earlier agent stored in its own namespace still reads.
	if err := unix.Setxattr(moved, "user.e2b.author", []byte("mish"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(moved, "user.sandpit.meta.old", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	st, err = again.fs.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: moved}))
	if got := st.Msg.GetEntry().GetMetadata(); err != nil || !reflect.DeepEqual(got, map[string]string{"author": "mish", "old": "kept"}) {
		t.Fatalf("metadata from xattrs: %v %v", got, err)
	}

	// A file without metadata reports none; bad metadata is refused before
	// anything is written.
	plain := filepath.Join(dir, "plain.txt")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err = again.fs.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: plain}))
	if err != nil || st.Msg.GetEntry().GetMetadata() != nil {
		t.Fatalf("plain file: %v %v", st, err)
	}
	long := http.Header{}
	long.Set("X-Metadata-Big", strings.Repeat("v", maxMetadataBytes+1))
	never := filepath.Join(dir, "never.txt")
	res, body = again.postFile(t, "?path="+url.QueryEscape(never), "application/octet-stream", strings.NewReader("x"), long)
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("oversized metadata: %d %s", res.StatusCode, body)
	}
	if _, err := os.Stat(never); !os.IsNotExist(err) {
		t.Fatalf("a refused upload wrote the file: %v", err)
	}
}

// sdkSignature computes a signature the way E2B's JS SDK does, independently
// of the agent's code: base64 of the SHA-256, '=' padding stripped.
func sdkSignature(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

func TestSignedFileURLs(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "signed.txt")
	if err := os.WriteFile(path, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	signed := func(p, op, user string, exp int64, sig string) string {
		q := url.Values{"path": {p}}
		if user != "" {
			q.Set("username", user)
		}
		if sig == "" {
			sig = sdkSignature(p, op, user, testToken, exp)
		}
		q.Set("signature", sig)
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return e.srv.URL + "/files?" + q.Encode()
	}
	tampered := sdkSignature(path, "read", "", testToken, 0)
	tampered = tampered[:len(tampered)-2] + "AA"
	tests := []struct {
		name   string
		method string
		url    string
		status int
		msg    string
	}{
		{"download", http.MethodGet, signed(path, "read", "", 0, ""), http.StatusOK, ""},
		{"download with user and expiry", http.MethodGet, signed(path, "read", "root", future, ""), http.StatusOK, ""},
		{"download expired", http.MethodGet, signed(path, "read", "", past, ""), http.StatusUnauthorized, "signature is already expired"},
		{"download tampered", http.MethodGet, signed(path, "read", "", 0, tampered), http.StatusUnauthorized, "invalid signature"},
		{"download with a write signature", http.MethodGet, signed(path, "write", "", 0, ""), http.StatusUnauthorized, "invalid signature"},
		{"download of another path", http.MethodGet, signed(path+"x", "read", "", 0, sdkSignature(path, "read", "", testToken, 0)), http.StatusUnauthorized, "invalid signature"},
		{"download with a stretched expiry", http.MethodGet, signed(path, "read", "", future+60, sdkSignature(path, "read", "", testToken, future)), http.StatusUnauthorized, "invalid signature"},
		{"upload", http.MethodPost, signed(filepath.Join(dir, "up.txt"), "write", "", future, ""), http.StatusOK, ""},
		{"upload expired", http.MethodPost, signed(filepath.Join(dir, "up2.txt"), "write", "", past, ""), http.StatusUnauthorized, "signature is already expired"},
		{"upload with a read signature", http.MethodPost, signed(filepath.Join(dir, "up3.txt"), "read", "", 0, ""), http.StatusUnauthorized, "invalid signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.url, strings.NewReader("uploaded"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			// No access token: http.DefaultClient, not e.http.
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = res.Body.Close() }()
			var b bytes.Buffer
			_, _ = b.ReadFrom(res.Body)
			if res.StatusCode != tt.status || !strings.Contains(b.String(), tt.msg) {
				t.Fatalf("%d %s, want %d %q", res.StatusCode, b.String(), tt.status, tt.msg)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "up.txt")); err != nil || string(b) != "uploaded" {
		t.Fatalf("signed upload wrote %q, %v", b, err)
	}
	for _, name := range []string{"up2.txt", "up3.txt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("a refused upload wrote %s", name)
		}
	}
	// A signature is no key to anything but /files.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/filesystem.Filesystem/Stat?signature="+url.QueryEscape(sdkSignature(path, "read", "", testToken, 0)), strings.NewReader(`{"path":"/"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("RPC with a signature: %d", res.StatusCode)
	}
}

// BenchmarkStat compares a Stat as root (no identity change) with one as an
// unprivileged user, whose file operations run on a thread of their own
// with that user's filesystem identity.
func BenchmarkStat(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("switching users needs root")
	}
	base := b.TempDir()
	etc := filepath.Join(base, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		b.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/tmp:/bin/sh\n"), 0o644)
	_ = os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nalice:x:1000:\n"), 0o644)
	a := &agent{cfg: Config{EtcDir: etc}.withDefaults(), accounts: accounts{etc: etc}}
	a.log = a.cfg.Logger
	s := &filesystemService{a: a}
	for _, user := range []string{"root", "alice"} {
		b.Run(user, func(b *testing.B) {
			ctx := context.WithValue(b.Context(), accountKey{}, a.identity(user))
			req := connect.NewRequest(&fspb.StatRequest{Path: "/tmp"})
			for b.Loop() {
				if _, err := s.Stat(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
