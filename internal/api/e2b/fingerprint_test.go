package e2b

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func mustBody(t *testing.T, js string) CreateBody {
	t.Helper()
	var b CreateBody
	if err := json.Unmarshal([]byte(js), &b); err != nil {
		t.Fatalf("unmarshal %s: %v", js, err)
	}
	return b
}

const baseBody = `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,
	"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`

func TestFingerprintIgnoresOrder(t *testing.T) {
	key := KeyIdentity("k")
	a := Fingerprint(key, mustBody(t, baseBody))
	b := Fingerprint(key, mustBody(t, `{"network":{"allowOut":["8.8.8.8","1.1.1.1","8.8.8.8"]},"timeout":60,
		"envVars":{"Y":"2","X":"1"},"metadata":{"b":"2","a":"1"},"templateID":"base"}`))
	if a != b {
		t.Fatalf("reordered body changed the fingerprint: %s != %s", a, b)
	}
}

func TestFingerprintDefaultsEqualExplicit(t *testing.T) {
	key := KeyIdentity("k")
	omitted := Fingerprint(key, mustBody(t, `{"templateID":"base"}`))
	for _, js := range []string{
		`{}`,
		`{"templateID":"base","timeout":300}`,
		`{"templateID":"base","metadata":{},"envVars":{}}`,
		`{"templateID":"base","metadata":null,"envVars":null}`,
		`{"templateID":"base","autoPause":false,"secure":false,"allow_internet_access":true}`,
		`{"templateID":"base","autoResume":{"enabled":false},"network":{}}`,
		`{"templateID":"base","someFieldTheSDKAddsLater":"x"}`,
	} {
		if got := Fingerprint(key, mustBody(t, js)); got != omitted {
			t.Errorf("%s: fingerprint differs from the omitted-defaults body", js)
		}
	}
}

func TestFingerprintDiffersPerField(t *testing.T) {
	key := KeyIdentity("k")
	base := Fingerprint(key, mustBody(t, baseBody))
	variants := map[string]string{
		"template":          `{"templateID":"other","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"metadata value":    `{"templateID":"base","metadata":{"a":"1","b":"3"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"metadata key":      `{"templateID":"base","metadata":{"a":"1","c":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"env value":         `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"3"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"env moved to md":   `{"templateID":"base","metadata":{"a":"1","b":"2","X":"1"},"envVars":{"Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"timeout":           `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":61,"network":{"allowOut":["1.1.1.1","8.8.8.8"]}}`,
		"autoPause":         `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]},"autoPause":true}`,
		"autoResume":        `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]},"autoResume":{"enabled":true}}`,
		"secure":            `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]},"secure":true}`,
		"internet access":   `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"]},"allow_internet_access":false}`,
		"allowOut":          `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1"]}}`,
		"denyOut":           `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"allowOut":["1.1.1.1","8.8.8.8"],"denyOut":["0.0.0.0/0"]}}`,
		"allow became deny": `{"templateID":"base","metadata":{"a":"1","b":"2"},"envVars":{"X":"1","Y":"2"},"timeout":60,"network":{"denyOut":["1.1.1.1","8.8.8.8"]}}`,
	}
	seen := map[string]string{base: "base"}
	for name, js := range variants {
		fp := Fingerprint(key, mustBody(t, js))
		if prev, dup := seen[fp]; dup {
			t.Errorf("%s: same fingerprint as %s", name, prev)
		}
		seen[fp] = name
	}
	if other := Fingerprint(KeyIdentity("another key"), mustBody(t, baseBody)); other == base {
		t.Error("a different API key gave the same fingerprint")
	}
}

func TestKeyIdentityHidesTheKey(t *testing.T) {
	const key = "sp_supersecretvalue"
	id := KeyIdentity(key)
	if strings.Contains(id, key) || id == KeyIdentity(key+"x") || id != KeyIdentity(key) {
		t.Fatalf("KeyIdentity(%q) = %q: must be a stable hash that does not contain the key", key, id)
	}
	// What gets stored is the fingerprint; it must not carry the key either.
	if fp := Fingerprint(id, mustBody(t, baseBody)); strings.Contains(fp, key) {
		t.Fatal("fingerprint contains the key")
	}
	if KeyFingerprint(id, "k1") == KeyFingerprint(KeyIdentity("other"), "k1") {
		t.Fatal("the same Idempotency-Key from two API keys must not collide")
	}
	if KeyFingerprint(id, "k1") == KeyFingerprint(id, "k2") {
		t.Fatal("two Idempotency-Keys collide")
	}
}

func TestSandboxIDFor(t *testing.T) {
	dns := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	fp := Fingerprint(KeyIdentity("k"), mustBody(t, baseBody))
	a1, a1again, a2 := SandboxIDFor(fp, 1), SandboxIDFor(fp, 1), SandboxIDFor(fp, 2)
	if a1 != a1again {
		t.Fatal("SandboxIDFor is not deterministic")
	}
	if a1 == a2 {
		t.Fatal("a new generation must get a new id")
	}
	if SandboxIDFor(Fingerprint(KeyIdentity("k2"), mustBody(t, baseBody)), 1) == a1 {
		t.Fatal("different fingerprints gave the same id")
	}
	for _, id := range []string{a1, a2} {
		if !dns.MatchString(id) {
			t.Fatalf("id %q is not a DNS label", id)
		}
	}
}

func TestParseMetadataFilterTripleEncoding(t *testing.T) {
	// What SDK 2.51.0 produces for {"user name": "a&b=c", "k%": "ü"}:
	// encodeURIComponent on each key and value, then URLSearchParams, then
	// the query string encoding (undone by url.Values before this point).
	raw := "user%2520name=a%2526b%253Dc&k%2525=%25C3%25BC"
	got, err := parseMetadataFilter(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user name": "a&b=c", "k%": "ü"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// A client that encodes one layer fewer still matches literal values.
	got, err = parseMetadataFilter("pct=100%25")
	if err != nil || got["pct"] != "100%" {
		t.Fatalf("single-encoded filter: got %v, %v", got, err)
	}
}
