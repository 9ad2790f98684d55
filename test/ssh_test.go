package sandpit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// sshBaseImage is the realistic image the SSH tests log into: Debian with
// bash, coreutils and python3, as E2B's base.
const sshBaseImage = "sandpit/base:latest"

// requireTools skips unless the OpenSSH client tools are installed (CI
// installs openssh-client).
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (apt-get install openssh-client)", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
}

// sshKeygen makes an ed25519 key pair in dir and returns the private key's
// path and the public key's line.
func sshKeygen(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name+"@test", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.TrimSpace(string(pub))
}

// fingerprint is the key's SHA256 fingerprint as ssh-keygen prints it.
func fingerprint(t *testing.T, keyPath string) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", keyPath+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[1]
}

// sshClient runs OpenSSH's tools against one daemon's SSH endpoint with
// one key and one known_hosts file.
type sshClient struct {
	t          *testing.T
	addr, port string
	key        string
	knownHosts string
	// strict: the host key must already be in knownHosts (after a restart).
	strict bool
}

func (c sshClient) opts() []string {
	check := "accept-new"
	if c.strict {
		check = "yes"
	}
	return []string{"-o", "StrictHostKeyChecking=" + check, "-o", "UserKnownHostsFile=" + c.knownHosts,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-i", c.key, "-o", "BatchMode=yes",
		"-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR", "-F", "none"}
}

// command builds tool (ssh, scp, sftp) with the client's options; ssh
// takes the port as -p, scp and sftp as -P.
func (c sshClient) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	flag := "-p"
	if tool != "ssh" {
		flag = "-P"
	}
	full := append(append([]string{flag, c.port}, c.opts()...), args...)
	cmd := exec.CommandContext(ctx, tool, full...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	return cmd
}

// run runs tool and returns its stdout, stderr and exit code.
func (c sshClient) run(ctx context.Context, stdin []byte, tool string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.command(ctx, tool, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		c.t.Fatalf("%s %v: %v", tool, args, err)
	}
	return out.String(), errb.String(), 0
}

// sshDaemon starts a daemon serving SSH on a port of its own and returns
// it with the SSH port.
func sshDaemon(t *testing.T, args ...string) (*harness.Daemon, *string) {
	t.Helper()
	port := new(string)
	d := harness.Start(t, sandpitBin, harness.Options{Args: args, PortArgs: func() []string {
		*port = strconv.Itoa(testkit.FreePort(t))
		return []string{"--ssh-listen", "127.0.0.1:" + *port}
	}})
	return d, port
}

// TestSSHKeysAPI: a key is registered once however often it is added (the
// same key again, the same Idempotency-Key again), a read-only token may
// list keys but not add or remove them, another owner may neither register
// nor see nor remove the key, and the CLI adds, lists and removes keys.
func TestSSHKeysAPI(t *testing.T) {
	t.Parallel()
	requireTools(t, "ssh-keygen")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	admin := d.Client()
	mint := func(name, owner string, scopes ...string) string {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: name, Owner: owner, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Secret
	}
	alice, aliceRO, bob := mint("alice-rw", "alice"), mint("alice-ro", "alice", "sandboxes:read"), mint("bob-rw", "bob")
	dir := t.TempDir()
	keyPath, pub := sshKeygen(t, dir, "alice")
	fp := fingerprint(t, keyPath)
	body, _ := json.Marshal(map[string]string{"public_key": pub})

	// The same key three times, twice under one Idempotency-Key: one key.
	first := raw(t, ctx, d, alice, "POST", "/v1/ssh-keys", string(body), "Idempotency-Key", "add-alice-1")
	again := raw(t, ctx, d, alice, "POST", "/v1/ssh-keys", string(body), "Idempotency-Key", "add-alice-1")
	plain := raw(t, ctx, d, alice, "POST", "/v1/ssh-keys", string(body))
	if first.Status != 201 || again.Status != 201 || !again.Replayed || plain.Status != 200 {
		t.Fatalf("adds answered %d, %d (replayed %v), %d: %s %s %s", first.Status, again.Status, again.Replayed, plain.Status, first.Body, again.Body, plain.Body)
	}
	var k client.SSHKey
	if err := json.Unmarshal(plain.Body, &k); err != nil {
		t.Fatal(err)
	}
	if k.Fingerprint != fp || k.Owner != "alice" || k.Name != "alice@test" || k.Type != "ssh-ed25519" {
		t.Fatalf("key = %+v, want fingerprint %s of alice named alice@test", k, fp)
	}
	// Under another name it is still the one key, with its first name.
	if k2, err := client.New(d.Addr, alice).AddSSHKey(ctx, "laptop", pub); err != nil || k2.Fingerprint != fp || k2.Name != "alice@test" {
		t.Fatalf("add under another name: %+v %v", k2, err)
	}
	keys, err := client.New(d.Addr, aliceRO).SSHKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Fingerprint != fp {
		t.Fatalf("alice's read token lists %+v %v, want the one key", keys, err)
	}

	// A read-only token may not add or remove a key.
	_, otherPub := sshKeygen(t, dir, "other")
	if _, err := client.New(d.Addr, aliceRO).AddSSHKey(ctx, "", otherPub); apiCode(err) != "forbidden" {
		t.Fatalf("read token's add: %v, want forbidden", err)
	}
	if err := client.New(d.Addr, aliceRO).DeleteSSHKey(ctx, fp); apiCode(err) != "forbidden" {
		t.Fatalf("read token's delete: %v, want forbidden", err)
	}

	// Another owner can neither see the key nor remove it.
	bc := client.New(d.Addr, bob)
	if keys, err := bc.SSHKeys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("bob lists %+v %v, want none", keys, err)
	}
	for _, ref := range []string{fp, "alice@test"} {
		if err := bc.DeleteSSHKey(ctx, ref); apiCode(err) != "not_found" {
			t.Fatalf("bob's delete of %s: %v, want not_found", ref, err)
		}
	}

	// Bad input: a clear error and no key.
	for _, bad := range []string{"", "not a key", "ssh-ed25519 AAAA", pub + "\n" + otherPub} {
		if _, err := bc.AddSSHKey(ctx, "", bad); apiCode(err) != "bad_request" {
			t.Fatalf("add %q: %v, want bad_request", bad, err)
		}
	}
	if keys, _ := bc.SSHKeys(ctx); len(keys) != 0 {
		t.Fatalf("after refused adds bob has keys %+v", keys)
	}
	// A public key is public: bob may register alice's too (a row of his
	// own, which opens only his sandboxes: TestSSHKeyBelongsToItsOwner),
	// and removing his leaves hers.
	if k, err := bc.AddSSHKey(ctx, "", pub); err != nil || k.Owner != "bob" {
		t.Fatalf("bob's add of alice's public key: %+v %v", k, err)
	}
	if err := bc.DeleteSSHKey(ctx, fp); err != nil {
		t.Fatalf("bob's delete of his registration: %v", err)
	}
	if keys, err := client.New(d.Addr, alice).SSHKeys(ctx); err != nil || len(keys) != 1 || keys[0].Fingerprint != fp {
		t.Fatalf("alice's keys after bob's delete: %+v %v", keys, err)
	}
	// A name the owner gave another key is refused.
	if _, err := client.New(d.Addr, alice).AddSSHKey(ctx, "alice@test", otherPub); apiCode(err) != "name_conflict" {
		t.Fatalf("add of another key under a taken name: %v, want name_conflict", err)
	}

	// The CLI, as alice: add (idempotent), ls, rm.
	cliAs := func(token string, args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, sandpitBin, append([]string{"--addr", d.Addr}, args...)...)
		cmd.Env = append(os.Environ(), "SANDPIT_TOKEN="+token)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out) + errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := cliAs(alice, "ssh-key", "add", keyPath+".pub"); code != 0 || strings.TrimSpace(out) != fp {
		t.Fatalf("sandpit ssh-key add (again): %d %q, want %s", code, out, fp)
	}
	if out, code := cliAs(alice, "ssh-key", "add", "--name", "other", filepath.Join(dir, "other.pub")); code != 0 || !strings.HasPrefix(out, "SHA256:") {
		t.Fatalf("sandpit ssh-key add other: %d %q", code, out)
	}
	if out, code := cliAs(alice, "ssh-key", "ls"); code != 0 || !strings.Contains(out, fp) || !strings.Contains(out, "other") {
		t.Fatalf("sandpit ssh-key ls: %d %q", code, out)
	}
	if out, code := cliAs(alice, "ssh-key", "rm", "other", fp); code != 0 {
		t.Fatalf("sandpit ssh-key rm: %d %q", code, out)
	}
	if keys, err := client.New(d.Addr, alice).SSHKeys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("after rm alice has %+v %v", keys, err)
	}
}

// TestSSH drives the SSH endpoint with Debian's OpenSSH client: a command
// and its exit code, streamed stdin and separate stderr, an interactive
// session typed through script(1), scp up and down, an sftp batch, ssh -L
// to a web server in the sandbox, refusals (another owner's key, a key
// nobody registered, remote forwards), the same host key after a restart,
// and a removed key's end of access.
func TestSSH(t *testing.T) {
	t.Parallel()
	requireTools(t, "ssh", "scp", "sftp", "ssh-keygen", "script")
	harness.RequireDocker(t)
	if out, err := exec.Command("docker", "image", "inspect", sshBaseImage).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (scripts/build-base-image.sh): %s", sshBaseImage, out)
		}
		t.Skipf("%s is missing (scripts/build-base-image.sh)", sshBaseImage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	d, port := sshDaemon(t, "--default-image", sshBaseImage)
	admin := d.Client()
	mint := func(name, owner string) *client.Client {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: name, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return client.New(d.Addr, tok.Secret)
	}
	alice, bob := mint("alice", "alice"), mint("bob", "bob")
	dir := t.TempDir()
	aliceKey, alicePub := sshKeygen(t, dir, "alice")
	bobKey, bobPub := sshKeygen(t, dir, "bob")
	strangerKey, _ := sshKeygen(t, dir, "stranger")
	if _, err := alice.AddSSHKey(ctx, "", alicePub); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.AddSSHKey(ctx, "", bobPub); err != nil {
		t.Fatal(err)
	}
	name := "demo-" + randomHex(4)
	sb, err := alice.Create(ctx, client.CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	bobSB, err := bob.Create(ctx, client.CreateRequest{Name: "bob-" + randomHex(4)})
	if err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(dir, "known_hosts")
	as := func(key string) sshClient {
		return sshClient{t: t, addr: "127.0.0.1", port: *port, key: key, knownHosts: known}
	}
	a := as(aliceKey)
	host := name + "@127.0.0.1"

	// The sandbox's account (root for a native create) and its home, as
	// exec sees them: an SSH login is the same account.
	who, err := alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "id -un; echo $HOME"}})
	if err != nil || who.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", who, err)
	}
	account, home, _ := strings.Cut(strings.TrimSpace(who.Stdout), "\n")
	if !strings.HasPrefix(home, "/") {
		t.Fatalf("the sandbox's home is %q", home)
	}

	t.Run("command", func(t *testing.T) {
		out, errOut, code := a.run(ctx, nil, "ssh", host, "echo $HOME")
		if code != 0 || strings.TrimSpace(out) != home {
			t.Fatalf("ssh %s 'echo $HOME': %d %q %q, want %s", host, code, out, errOut, home)
		}
		// By id and by an id prefix, too.
		for _, ref := range []string{sb.ID, sb.ID[:len(sb.ID)-4]} {
			if out, errOut, code := a.run(ctx, nil, "ssh", ref+"@127.0.0.1", "id -un"); code != 0 || strings.TrimSpace(out) != account {
				t.Fatalf("ssh %s@: %d %q %q", ref, code, out, errOut)
			}
		}
		if _, _, code := a.run(ctx, nil, "ssh", host, "exit 7"); code != 7 {
			t.Fatalf("exit 7 came back as %d", code)
		}
		// A command killed by a signal is reported as one (ssh exits 255).
		if _, errOut, code := a.run(ctx, nil, "ssh", host, "kill -KILL $$"); code != 255 {
			t.Fatalf("a killed command came back as %d %q", code, errOut)
		} else {
			t.Logf("killed: %q", errOut)
		}
		// Environment requests: set, except a reserved name.
		out, errOut, code = a.run(ctx, nil, "ssh", "-o", "SetEnv=GREETING=hi SANDPIT_AGENT_TOKEN=x", host, `echo "$GREETING:${SANDPIT_AGENT_TOKEN:-unset}"`)
		if code != 0 || strings.TrimSpace(out) != "hi:unset" {
			t.Fatalf("SetEnv: %d %q %q", code, out, errOut)
		}
		out, errOut, code = a.run(ctx, []byte("one\ntwo\n"), "ssh", host, "tr a-z A-Z; echo oops >&2")
		if code != 0 || out != "ONE\nTWO\n" || strings.TrimSpace(errOut) != "oops" {
			t.Fatalf("stdin and stderr: %d %q %q", code, out, errOut)
		}
	})

	t.Run("interactive", func(t *testing.T) {
		// script gives ssh a terminal; what is piped into script is
		// typed into it.
		sshLine := "ssh -tt -p " + *port + " " + strings.Join(a.opts(), " ") + " " + host
		cmd := exec.CommandContext(ctx, "script", "-qec", sshLine, "/dev/null")
		cmd.Env = append(os.Environ(), "TERM=xterm-256color")
		cmd.Stdin = strings.NewReader("echo term=$TERM; tty; stty size; exit 3\n")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("interactive session: %v\n%s", err, out)
		}
		s := string(out)
		for _, want := range []string{"term=xterm-256color", "/dev/pts/"} {
			if !strings.Contains(s, want) {
				t.Fatalf("interactive session printed no %q:\n%s", want, s)
			}
		}
	})

	payload := make([]byte, 300<<10)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "payload.bin")
	if err := os.WriteFile(local, payload, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("scp", func(t *testing.T) {
		if out, errOut, code := a.run(ctx, nil, "scp", local, host+":/tmp/up.bin"); code != 0 {
			t.Fatalf("scp up: %d %s %s", code, out, errOut)
		}
		var got bytes.Buffer
		if err := alice.ReadFile(ctx, sb.ID, "/tmp/up.bin", &got); err != nil || !bytes.Equal(got.Bytes(), payload) {
			t.Fatalf("uploaded file: %d bytes (%v), want the %d sent", got.Len(), err, len(payload))
		}
		// A relative path lands in the home directory.
		if _, errOut, code := a.run(ctx, nil, "scp", local, host+":rel.bin"); code != 0 {
			t.Fatalf("scp to a relative path: %d %s", code, errOut)
		}
		if out, _, _ := a.run(ctx, nil, "ssh", host, "cmp /tmp/up.bin \"$HOME/rel.bin\" && echo same"); strings.TrimSpace(out) != "same" {
			t.Fatalf("relative upload: %q", out)
		}
		down := filepath.Join(dir, "down.bin")
		if out, errOut, code := a.run(ctx, nil, "scp", host+":/tmp/up.bin", down); code != 0 {
			t.Fatalf("scp down: %d %s %s", code, out, errOut)
		}
		if b, err := os.ReadFile(down); err != nil || !bytes.Equal(b, payload) {
			t.Fatalf("downloaded %d bytes (%v), want the %d uploaded", len(b), err, len(payload))
		}
		if _, errOut, code := a.run(ctx, nil, "scp", host+":/tmp/no-such-file", down); code == 0 || !strings.Contains(errOut, "No such file") {
			t.Fatalf("scp of a missing file: %d %q", code, errOut)
		}
	})

	t.Run("sftp", func(t *testing.T) {
		batch := filepath.Join(dir, "batch")
		script := "mkdir /tmp/sdir\nput " + local + " /tmp/sdir/a.bin\nrename /tmp/sdir/a.bin /tmp/sdir/b.bin\nls -1 /tmp/sdir\n" +
			"get /tmp/sdir/b.bin " + filepath.Join(dir, "b.bin") + "\nrm /tmp/sdir/b.bin\nrmdir /tmp/sdir\nls -1 /tmp\n"
		if err := os.WriteFile(batch, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := a.run(ctx, nil, "sftp", "-b", batch, host)
		if code != 0 {
			t.Fatalf("sftp -b: %d\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(out, "/tmp/sdir/b.bin") || !strings.Contains(out, "/tmp/up.bin") {
			t.Fatalf("sftp listings lack the files:\n%s", out)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "b.bin")); err != nil || !bytes.Equal(b, payload) {
			t.Fatalf("sftp get: %d bytes (%v)", len(b), err)
		}
		if out, _, _ := a.run(ctx, nil, "ssh", host, "test -e /tmp/sdir && echo left || echo gone"); strings.TrimSpace(out) != "gone" {
			t.Fatalf("after rmdir /tmp/sdir is %q", out)
		}
	})

	t.Run("local forward", func(t *testing.T) {
		if _, errOut, code := a.run(ctx, nil, "ssh", host, "cd /tmp && (setsid python3 -m http.server 8080 >/dev/null 2>&1 &) ; echo started"); code != 0 {
			t.Fatalf("start the web server: %d %s", code, errOut)
		}
		lport := strconv.Itoa(testkit.FreePort(t))
		fwd := a.command(ctx, "ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-L", "127.0.0.1:"+lport+":localhost:8080", host)
		var fwdErr bytes.Buffer
		fwd.Stderr = &fwdErr
		if err := fwd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = fwd.Process.Kill()
			_ = fwd.Wait()
		}()
		var body []byte
		var last error
		for i := 0; i < 100; i++ {
			resp, err := http.Get("http://127.0.0.1:" + lport + "/up.bin")
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == 200 {
					last = nil
					break
				}
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			last = err
			time.Sleep(200 * time.Millisecond)
		}
		if last != nil || !bytes.Equal(body, payload) {
			t.Fatalf("GET through the forward: %d bytes, %v\n%s", len(body), last, fwdErr.String())
		}
		// A forward anywhere but the sandbox is refused.
		fwd2 := a.command(ctx, "ssh", "-o", "ExitOnForwardFailure=yes", "-W", "192.0.2.1:80", host)
		out, _ := fwd2.CombinedOutput()
		if fwd2.ProcessState.ExitCode() != 255 || !strings.Contains(string(out), "forwarding failed") {
			t.Fatalf("ssh -W to another host: %d %s", fwd2.ProcessState.ExitCode(), out)
		}
		// Remote forwards are not offered.
		_, errOut, code := a.run(ctx, nil, "ssh", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:9", host, "true")
		if code == 0 || !strings.Contains(errOut, "remote port forwarding failed") {
			t.Fatalf("ssh -R: %d %q", code, errOut)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			what, key, user string
		}{
			{"another owner's key", bobKey, name},
			{"a key nobody registered", strangerKey, name},
			{"another owner's sandbox by id", aliceKey, bobSB.ID},
			{"another owner's sandbox by name", aliceKey, bobSB.Name},
			{"no such sandbox", aliceKey, "nosuch"},
		} {
			out, errOut, code := as(c.key).run(ctx, nil, "ssh", c.user+"@127.0.0.1", "echo in")
			if code != 255 || strings.Contains(out, "in") || !strings.Contains(errOut, "Permission denied") {
				t.Errorf("%s: %d %q %q, want refused", c.what, code, out, errOut)
			}
		}
		// Bob's key opens bob's sandbox.
		if out, errOut, code := as(bobKey).run(ctx, nil, "ssh", bobSB.Name+"@127.0.0.1", "echo in"); code != 0 || strings.TrimSpace(out) != "in" {
			t.Fatalf("bob into his own sandbox: %d %q %q", code, out, errOut)
		}
	})

	t.Run("access token", func(t *testing.T) {
		// Minted twice under one Idempotency-Key: one token.
		first := raw(t, ctx, d, d.Token, "POST", "/v1/sandboxes/"+sb.ID+"/ssh-access", `{"valid_minutes":5}`, "Idempotency-Key", "ssh-access-1")
		again := raw(t, ctx, d, d.Token, "POST", "/v1/sandboxes/"+sb.ID+"/ssh-access", `{"valid_minutes":5}`, "Idempotency-Key", "ssh-access-1")
		var ta, tb client.SSHAccess
		_ = json.Unmarshal(first.Body, &ta)
		_ = json.Unmarshal(again.Body, &tb)
		if first.Status != 201 || !again.Replayed || ta.Token == "" || ta.Token != tb.Token || ta.SandboxID != sb.ID {
			t.Fatalf("ssh-access: %d %s / %d %s", first.Status, first.Body, again.Status, again.Body)
		}
		// Bob may not mint one for alice's sandbox.
		if _, err := bob.CreateSSHAccess(ctx, sb.ID, 0); apiCode(err) != "not_found" {
			t.Fatalf("bob's ssh-access to alice's sandbox: %v, want not_found", err)
		}
		noKey := func(extra ...string) []string {
			return append([]string{"-p", *port, "-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile=" + known,
				"-o", "PubkeyAuthentication=no", "-o", "IdentityAgent=none", "-o", "LogLevel=ERROR", "-F", "none"}, extra...)
		}
		// The token as the user name, with no key at all.
		cmd := exec.CommandContext(ctx, "ssh", noKey("-o", "BatchMode=yes", ta.Token+"@127.0.0.1", "echo $HOME")...)
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != home {
			t.Fatalf("ssh TOKEN@: %v %q", err, out)
		}
		// The token as the password of the sandbox's name, through
		// ssh's askpass; the name of another sandbox is refused.
		askpass := filepath.Join(dir, "askpass")
		if err := os.WriteFile(askpass, []byte("#!/bin/sh\necho "+ta.Token+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		withPassword := func(user string) (string, error) {
			cmd := exec.CommandContext(ctx, "ssh", noKey("-o", "BatchMode=no", "-o", "NumberOfPasswordPrompts=1",
				"-o", "PreferredAuthentications=password", user+"@127.0.0.1", "echo pw")...)
			cmd.Env = append(os.Environ(), "SSH_ASKPASS="+askpass, "SSH_ASKPASS_REQUIRE=force", "DISPLAY=")
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := withPassword(name); err != nil || strings.TrimSpace(out) != "pw" {
			t.Fatalf("ssh %s@ with the token as password: %v %q", name, err, out)
		}
		if out, err := withPassword(bobSB.ID); err == nil {
			t.Fatalf("the token as the password of bob's sandbox was accepted: %q", out)
		}
		// Revoked, it is refused.
		if err := alice.RevokeSSHAccess(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		cmd = exec.CommandContext(ctx, "ssh", noKey("-o", "BatchMode=yes", ta.Token+"@127.0.0.1", "true")...)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Fatalf("revoked token: %v %q", err, out)
		}
		// The CLI mints one by the sandbox's name.
		mint := exec.CommandContext(ctx, sandpitBin, "--addr", d.Addr, "ssh-access", name, "--minutes", "5")
		mint.Env = append(os.Environ(), "SANDPIT_TOKEN="+d.Token)
		tok, err := mint.Output()
		if err != nil {
			t.Fatalf("sandpit ssh-access: %v", err)
		}
		cmd = exec.CommandContext(ctx, "ssh", noKey("-o", "BatchMode=yes", strings.TrimSpace(string(tok))+"@127.0.0.1", "echo cli")...)
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "cli" {
			t.Fatalf("ssh with the CLI's token: %v %q", err, out)
		}
	})

	t.Run("restart keeps the host key", func(t *testing.T) {
		keyFile := filepath.Join(d.DataDir, "ssh_host_ed25519_key")
		fi, err := os.Stat(keyFile)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("host key %s: %v %v, want mode 0600", keyFile, fi.Mode(), err)
		}
		d.Stop()
		d.Restart(nil)
		strict := a
		strict.strict = true
		if out, errOut, code := strict.run(ctx, nil, "ssh", host, "echo back"); code != 0 || strings.TrimSpace(out) != "back" {
			t.Fatalf("after a restart, with the known host key required: %d %q %q", code, out, errOut)
		}
	})

	t.Run("a removed key is refused", func(t *testing.T) {
		if err := alice.DeleteSSHKey(ctx, "alice@test"); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := a.run(ctx, nil, "ssh", host, "true"); code != 255 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("removed key: %d %q", code, errOut)
		}
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
