package sandpit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// call makes one request to d as token, with an Idempotency-Key when key is
// not empty, and returns the status and the body.
func call(t *testing.T, ctx context.Context, d *harness.Daemon, token, method, path, body, key string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func secretValue(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "sv-" + hex.EncodeToString(b[:])
}

// TestSecretsStore: the /v1 secrets store through a real daemon. A keyed
// create replayed makes one secret, an unkeyed retry with the same value
// lands on it, another value is 409; no answer, log line, or byte of the
// data directory holds a value in the clear; another owner neither sees nor
// removes the secret, and a read-only token lists but cannot write.
func TestSecretsStore(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	tokens, ro := ownerTokens(t, ctx, d.Client(), "alice", "bob")
	alice, bob := tokens["alice"], tokens["bob"]
	value, value2, bobValue := secretValue(t), secretValue(t), secretValue(t)
	var answers []string
	do := func(token, method, path, body, key string, want int) apitypes.Secret {
		t.Helper()
		status, b := call(t, ctx, d, token, method, path, body, key)
		answers = append(answers, string(b))
		if status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
		}
		var s apitypes.Secret
		if status < 300 && len(b) > 0 && method != http.MethodGet {
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	create := `{"name":"GH_Token","value":"` + value + `"}`

	first := do(alice, http.MethodPost, "/v1/secrets", create, "k1", http.StatusCreated)
	if first.Name != "gh_token" || first.Version != 1 || !strings.HasPrefix(first.ID, "sec_") {
		t.Fatalf("created %+v", first)
	}
	if again := do(alice, http.MethodPost, "/v1/secrets", create, "k1", http.StatusCreated); again.ID != first.ID {
		t.Fatalf("the replayed create answered %s, not %s", again.ID, first.ID)
	}
	if again := do(alice, http.MethodPost, "/v1/secrets", create, "", http.StatusOK); again.ID != first.ID {
		t.Fatalf("the unkeyed retry answered %s, not %s", again.ID, first.ID)
	}
	do(alice, http.MethodPost, "/v1/secrets", `{"name":"gh_token","value":"`+value2+`"}`, "", http.StatusConflict)
	do(alice, http.MethodPost, "/v1/secrets", `{"name":"bad name","value":"x"}`, "", http.StatusBadRequest)
	do(alice, http.MethodPost, "/v1/secrets", `{"name":"crlf","value":"a\r\nX-Evil: 1"}`, "", http.StatusBadRequest)

	list := func(token string) []apitypes.Secret {
		t.Helper()
		status, b := call(t, ctx, d, token, http.MethodGet, "/v1/secrets", "", "")
		answers = append(answers, string(b))
		if status != http.StatusOK {
			t.Fatalf("list: %d %s", status, b)
		}
		var out apitypes.ListSecretsResponse
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out.Secrets
	}
	if got := list(alice); len(got) != 1 || got[0].ID != first.ID || got[0].Hosts == nil {
		t.Fatalf("alice lists %+v", got)
	}
	do(alice, http.MethodGet, "/v1/secrets/gh_token", "", "", http.StatusOK)
	do(alice, http.MethodGet, "/v1/secrets/"+first.ID, "", "", http.StatusOK)
	updated := do(alice, http.MethodPut, "/v1/secrets/gh_token", `{"value":"`+value2+`"}`, "u1", http.StatusOK)
	if updated.ID != first.ID || updated.Version != 2 {
		t.Fatalf("updated %+v", updated)
	}
	if same := do(alice, http.MethodPut, "/v1/secrets/gh_token", `{"value":"`+value2+`"}`, "", http.StatusOK); same.Version != 2 {
		t.Fatalf("setting the same value again made version %d", same.Version)
	}

	// Another owner: not there to see, update or remove; its own secret of
	// the same name is another secret.
	if got := list(bob); len(got) != 0 {
		t.Fatalf("bob lists %+v", got)
	}
	do(bob, http.MethodGet, "/v1/secrets/gh_token", "", "", http.StatusNotFound)
	do(bob, http.MethodGet, "/v1/secrets/"+first.ID, "", "", http.StatusNotFound)
	do(bob, http.MethodPut, "/v1/secrets/gh_token", `{"value":"x"}`, "", http.StatusNotFound)
	do(bob, http.MethodDelete, "/v1/secrets/"+first.ID, "", "", http.StatusNotFound)
	if own := do(bob, http.MethodPost, "/v1/secrets", `{"name":"gh_token","value":"`+bobValue+`"}`, "k1", http.StatusCreated); own.ID == first.ID {
		t.Fatal("bob's create of the name answered alice's secret")
	}

	// A read-only token reads names only.
	if got := list(ro.Secret); len(got) != 1 {
		t.Fatalf("the read-only token lists %+v", got)
	}
	do(ro.Secret, http.MethodPost, "/v1/secrets", `{"name":"other","value":"x"}`, "", http.StatusForbidden)
	do(ro.Secret, http.MethodDelete, "/v1/secrets/gh_token", "", "", http.StatusForbidden)

	// The Go client and the admin's debug state.
	ac := client.New(d.URL(), alice)
	if s, err := ac.Secret(ctx, "gh_token"); err != nil || s.Version != 2 {
		t.Fatalf("client: %+v, %v", s, err)
	}
	if _, b := call(t, ctx, d, d.Token, http.MethodGet, "/v1/debug/state", "", ""); len(b) > 0 {
		answers = append(answers, string(b))
	}

	for _, v := range []string{value, value2, bobValue} {
		for _, a := range answers {
			if strings.Contains(a, v) {
				t.Fatalf("an answer holds a secret's value: %s", a)
			}
		}
		if strings.Contains(d.Logs(), v) {
			t.Fatal("the daemon's log holds a secret's value")
		}
	}

	key, err := os.Stat(filepath.Join(d.DataDir, "secrets-key"))
	if err != nil {
		t.Fatal(err)
	}
	if key.Mode().Perm() != 0o600 {
		t.Fatalf("the key file's mode is %v", key.Mode().Perm())
	}
	// The database (and its WAL) and everything else in the data directory
	// hold the values sealed only.
	err = filepath.WalkDir(d.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range []string{value, value2, bobValue} {
			if strings.Contains(string(b), v) {
				t.Errorf("%s holds a secret's value in the clear", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	do(alice, http.MethodDelete, "/v1/secrets/gh_token", "", "d1", http.StatusNoContent)
	do(alice, http.MethodDelete, "/v1/secrets/gh_token", "", "d1", http.StatusNoContent)
	do(alice, http.MethodGet, "/v1/secrets/gh_token", "", "", http.StatusNotFound)
	if got := list(bob); len(got) != 1 {
		t.Fatalf("alice's delete took bob's secret: %+v", got)
	}
}

// TestSecretCLI: sandpit secret set reads the value from stdin (dropping
// the line break echo adds), and sets it again as a new version; ls prints
// names and versions, never a value; rm removes it.
func TestSecretCLI(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	value, value2 := secretValue(t), secretValue(t)
	var outputs []string
	run := func(stdin string, want int, args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, ctx, d, []byte(stdin), args...)
		outputs = append(outputs, out, errOut)
		if code != want {
			t.Fatalf("sandpit %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out
	}
	id := strings.TrimSpace(run(value+"\n", 0, "secret", "set", "NPM_TOKEN"))
	if !strings.HasPrefix(id, "sec_") {
		t.Fatalf("secret set printed %q, not an id", id)
	}
	if again := strings.TrimSpace(run(value2, 0, "secret", "set", "npm_token")); again != id {
		t.Fatalf("setting a new value printed %q, not %q", again, id)
	}
	run("", 1, "secret", "set", "empty")
	ls := run("", 0, "secret", "ls")
	if !strings.Contains(ls, "npm_token") || !strings.Contains(ls, id) || strings.Contains(ls, "empty") {
		t.Fatalf("secret ls:\n%s", ls)
	}
	s, err := d.Client().Secret(ctx, "npm_token")
	if err != nil || s.Version != 2 {
		t.Fatalf("after two sets: %+v, %v", s, err)
	}
	run("", 0, "secret", "rm", "npm_token")
	if ls := run("", 0, "secret", "ls"); strings.Contains(ls, "npm_token") {
		t.Fatalf("secret ls after rm:\n%s", ls)
	}
	for _, v := range []string{value, value2} {
		for _, o := range outputs {
			if strings.Contains(o, v) {
				t.Fatalf("the CLI printed a secret's value: %s", o)
			}
		}
		if strings.Contains(d.Logs(), v) {
			t.Fatal("the daemon's log holds a secret's value")
		}
	}
}

// TestSecretsStormAndOwnerBound: ten concurrent unkeyed creates of one name
// and value make one secret (the unique index decides, not a lookup), and an
// owner holds at most secrets.MaxPerOwner (1000): the next create is a 429
// that writes nothing, while a retry of a secret the owner has still
// answers as a retry.
func TestSecretsStormAndOwnerBound(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	value := secretValue(t)
	body := `{"name":"storm","value":"` + value + `"}`
	type answer struct {
		status int
		id     string
	}
	answers := make(chan answer, 10)
	for range 10 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v1/secrets", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+d.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			defer resp.Body.Close()
			var s apitypes.Secret
			_ = json.NewDecoder(resp.Body).Decode(&s)
			answers <- answer{resp.StatusCode, s.ID}
		}()
	}
	ids := map[string]bool{}
	created := 0
	for range 10 {
		a := <-answers
		if a.status != http.StatusCreated && a.status != http.StatusOK {
			t.Fatalf("a create of the storm: %d", a.status)
		}
		if a.status == http.StatusCreated {
			created++
		}
		ids[a.id] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("the storm: %d created, ids %v; want one secret", created, ids)
	}

	// Fill the owner's bound (1000, the storm's secret included).
	for i := 1; i < 1000; i++ {
		if st, b := call(t, ctx, d, d.Token, http.MethodPost, "/v1/secrets", `{"name":"s`+strconv.Itoa(i)+`","value":"v"}`, ""); st != http.StatusCreated {
			t.Fatalf("secret %d of 1000: %d %s", i, st, b)
		}
	}
	st, b := call(t, ctx, d, d.Token, http.MethodPost, "/v1/secrets", `{"name":"one-too-many","value":"v"}`, "")
	if st != http.StatusTooManyRequests || !strings.Contains(string(b), "quota_exceeded") {
		t.Fatalf("the 1001st secret: %d %s, want 429 quota_exceeded", st, b)
	}
	if st, _ := call(t, ctx, d, d.Token, http.MethodGet, "/v1/secrets/one-too-many", "", ""); st != http.StatusNotFound {
		t.Errorf("the refused secret: GET %d, want 404 (nothing written)", st)
	}
	if st, _ := call(t, ctx, d, d.Token, http.MethodPost, "/v1/secrets", body, ""); st != http.StatusOK {
		t.Errorf("a retry of a secret the owner has, at the bound: %d, want 200", st)
	}
	var list apitypes.ListSecretsResponse
	if st, b := call(t, ctx, d, d.Token, http.MethodGet, "/v1/secrets", "", ""); st != http.StatusOK || json.Unmarshal(b, &list) != nil || len(list.Secrets) != 1000 {
		t.Errorf("list at the bound: %d, %d secrets, want 1000", st, len(list.Secrets))
	}
}
