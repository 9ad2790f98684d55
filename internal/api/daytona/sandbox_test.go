package daytona

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

func TestImageFromDockerfile(t *testing.T) {
	ok := map[string]string{
		"FROM debian:12\n":                              "debian:12",
		"FROM sandpit/base:test":                        "sandpit/base:test",
		"from alpine\r\n":                               "alpine",
		"# comment\n\n  FROM   ghcr.io/a/b@sha256:x \n": "ghcr.io/a/b@sha256:x",
	}
	for in, want := range ok {
		got, err := ImageFromDockerfile(in)
		if err != nil || got != want {
			t.Errorf("ImageFromDockerfile(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                                 "empty",
		"# only a comment\n":               "empty",
		"FROM a\nRUN echo hi\n":            "2 instructions",
		"RUN echo hi\n":                    `unsupported instruction "RUN"`,
		"FROM a AS b\n":                    "not a plain FROM",
		"FROM --platform=linux/arm64 a\n":  "not a plain FROM",
		"FROM\n":                           "not a plain FROM",
		"FROM python:3.12\nWORKDIR /app\n": "only a single FROM line",
	}
	for in, want := range bad {
		_, err := ImageFromDockerfile(in)
		if err == nil || !errors.Is(err, sandpit.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ImageFromDockerfile(%q) error = %v; want ErrInvalid containing %q", in, err, want)
		}
	}
}

func TestServiceRequestMapsNetworkRestrictions(t *testing.T) {
	yes := true
	for name, tc := range map[string]struct {
		req  CreateRequest
		want sandpit.NetworkPolicy
	}{
		"none":       {CreateRequest{}, sandpit.NetworkPolicy{}},
		"block all":  {CreateRequest{NetworkBlockAll: &yes}, sandpit.NetworkPolicy{Egress: sandpit.EgressNone}},
		"allow list": {CreateRequest{NetworkAllowList: "10.1.0.0/16, 1.1.1.1"}, sandpit.NetworkPolicy{Egress: sandpit.EgressNone, Allow: []string{"10.1.0.0/16", "1.1.1.1"}}},
	} {
		got, _, err := serviceRequest(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got.Network, tc.want) {
			t.Errorf("%s: network %+v, want %+v", name, got.Network, tc.want)
		}
	}
}

// TestServiceRequestBuildsImages: a single FROM line runs its image, while
// anything more, or a build context, is an Image to build first.
func TestServiceRequestBuildsImages(t *testing.T) {
	for in, build := range map[string]bool{
		"FROM alpine:3.19\n":              false,
		"FROM a\nRUN echo hi\n":           true,
		"FROM --platform=linux/amd64 a\n": true,
	} {
		got, bi, err := serviceRequest(CreateRequest{BuildInfo: &BuildInfo{DockerfileContent: in}})
		if err != nil || (bi != nil) != build || (!build && got.Image != "alpine:3.19") {
			t.Errorf("%q: image %q, build %v, err %v", in, got.Image, bi, err)
		}
	}
	_, bi, err := serviceRequest(CreateRequest{BuildInfo: &BuildInfo{DockerfileContent: "FROM a\nCOPY /x /x\n", ContextHashes: []string{"0123456789abcdef"}}})
	if err != nil || bi == nil || bi.ContextHashes[0] != "0123456789abcdef" {
		t.Errorf("with context: build %v, err %v", bi, err)
	}
}

func TestServiceRequestRefusesWhatItCannotHonour(t *testing.T) {
	one := 1.0
	cases := map[string]CreateRequest{
		"GPUs":                       {GPU: &one},
		"subpath":                    {Volumes: []SandboxVolume{{VolumeID: "v", MountPath: "/data", Subpath: "x"}}},
		"secrets":                    {Secrets: []json.RawMessage{[]byte(`{}`)}},
		"dockerfileContent is empty": {BuildInfo: &BuildInfo{DockerfileContent: " \n", ContextHashes: []string{"x"}}},
		"either snapshot or image":   {Snapshot: "base", BuildInfo: &BuildInfo{DockerfileContent: "FROM a\n"}},
	}
	for want, req := range cases {
		_, _, err := serviceRequest(req)
		if err == nil || !errors.Is(err, sandpit.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v", want, err)
		}
	}
	// domainAllowList blocks all but its names (and the CIDRs of
	// networkAllowList).
	sr, _, err := serviceRequest(CreateRequest{DomainAllowList: "example.com, *.daytona.io", NetworkAllowList: "192.0.2.0/24"})
	if err != nil || sr.Network.Egress != sandpit.EgressNone || strings.Join(sr.Network.AllowDomains, ",") != "example.com,*.daytona.io" ||
		strings.Join(sr.Network.Allow, ",") != "192.0.2.0/24" {
		t.Errorf("domainAllowList: %+v %v", sr.Network, err)
	}
	mem := 2.0
	ttl := 5
	got, _, err := serviceRequest(CreateRequest{Name: "n", Snapshot: "base", Memory: &mem, CPU: &one, TTLMinutes: &ttl})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "n" || got.Template != "base" || got.MemoryMB != 2048 || got.CPU != 1 || got.Timeout != 5*time.Minute {
		t.Fatalf("translated request = %+v", got)
	}
}

func TestErrorShapeAndAuth(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest("GET", e.srv.URL+"/daytona/sandbox", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}

	code, b := e.do("GET", "/daytona/sandbox/nope", nil)
	body := decode[ErrorBody](t, b)
	if code != 404 || body.StatusCode != 404 || body.Error != "Not Found" || body.Path != "/daytona/sandbox/nope" ||
		body.Message != "Sandbox with ID or name nope not found" {
		t.Fatalf("404 body = %d %s", code, b)
	}
	if _, err := time.Parse(time.RFC3339, body.Timestamp); err != nil {
		t.Fatalf("timestamp %q: %v", body.Timestamp, err)
	}
	var raw map[string]any
	_ = json.Unmarshal(b, &raw)
	for _, k := range []string{"path", "timestamp", "statusCode", "error", "message"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("error body lacks %q: %s", k, b)
		}
	}
}

func TestCreateGetListAndNames(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"name": "demo", "labels": map[string]string{"k": "v"}, "env": map[string]string{"A": "1"}})
	if sb.Name != "demo" || sb.State != "started" || sb.ToolboxProxyURL != e.srv.URL+"/daytona/toolbox" ||
		sb.Env["A"] != "1" || sb.Labels["k"] != "v" || sb.OrganizationID == "" || sb.User == "" || sb.Target == "" {
		t.Fatalf("created = %+v", sb)
	}

	// The duplicate name: 409 in Daytona's words, and nothing made.
	before := e.rt.count(t)
	code, b := e.do("POST", "/daytona/sandbox", map[string]any{"name": "demo"})
	body := decode[ErrorBody](t, b)
	if code != 409 || body.Message != "Sandbox with name demo already exists" || body.Error != "Conflict" {
		t.Fatalf("duplicate: %d %s", code, b)
	}
	if e.rt.count(t) != before {
		t.Fatal("a losing create made a container")
	}

	// Lookups by name and by id agree.
	for _, x := range []string{"demo", sb.ID} {
		code, b := e.do("GET", "/daytona/sandbox/"+x, nil)
		if got := decode[Sandbox](t, b); code != 200 || got.ID != sb.ID {
			t.Fatalf("get %s: %d %s", x, code, b)
		}
	}

	// An unnamed create is named after its id.
	anon := e.create(map[string]any{"labels": map[string]string{"k": "other"}})
	if anon.Name != anon.ID || anon.Name == "" {
		t.Fatalf("generated name %q for id %q", anon.Name, anon.ID)
	}

	// list: the labels filter is JSON; listed items carry no env.
	code, b = e.do("GET", "/daytona/sandbox?labels="+url.QueryEscape(`{"k":"v"}`), nil)
	list := decode[ListResponse](t, b)
	if code != 200 || len(list.Items) != 1 || list.Items[0].ID != sb.ID || list.NextCursor != nil {
		t.Fatalf("list by labels: %d %s", code, b)
	}
	if strings.Contains(string(b), `"env"`) {
		t.Fatalf("listed sandboxes carry env: %s", b)
	}
	// Paging with limit=1 and the cursor.
	code, b = e.do("GET", "/daytona/sandbox?limit=1", nil)
	page := decode[ListResponse](t, b)
	if code != 200 || len(page.Items) != 1 || page.NextCursor == nil {
		t.Fatalf("first page: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/sandbox?limit=1&cursor="+url.QueryEscape(*page.NextCursor), nil)
	page2 := decode[ListResponse](t, b)
	if code != 200 || len(page2.Items) != 1 || page2.Items[0].ID == page.Items[0].ID {
		t.Fatalf("second page: %d %s", code, b)
	}
	// Exact name filter and a state filter.
	code, b = e.do("GET", "/daytona/sandbox?name=demo&states=started", nil)
	if l := decode[ListResponse](t, b); code != 200 || len(l.Items) != 1 || l.Items[0].ID != sb.ID {
		t.Fatalf("name filter: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/sandbox?states=archived", nil)
	if l := decode[ListResponse](t, b); code != 200 || len(l.Items) != 0 {
		t.Fatalf("archived filter: %d %s", code, b)
	}
	if code, b = e.do("GET", "/daytona/sandbox?labels=notjson", nil); code != 400 {
		t.Fatalf("bad labels: %d %s", code, b)
	}
	if code, b = e.do("GET", "/daytona/sandbox?minCpu=2", nil); code != 400 {
		t.Fatalf("unsupported filter: %d %s", code, b)
	}

	// labels, stop, start, delete.
	code, b = e.do("PUT", "/daytona/sandbox/demo/labels", map[string]any{"labels": map[string]string{"x": "y"}})
	if l := decode[LabelsBody](t, b); code != 200 || len(l.Labels) != 1 || l.Labels["x"] != "y" {
		t.Fatalf("labels: %d %s", code, b)
	}
	code, b = e.do("POST", "/daytona/sandbox/demo/stop?force=false", nil)
	if s := decode[Sandbox](t, b); code != 200 || s.State != "stopped" {
		t.Fatalf("stop: %d %s", code, b)
	}
	code, b = e.do("POST", "/daytona/sandbox/"+sb.ID+"/start", nil)
	if s := decode[Sandbox](t, b); code != 200 || s.State != "started" {
		t.Fatalf("start: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/sandbox/demo/toolbox-proxy-url", nil)
	if u := decode[map[string]string](t, b); code != 200 || u["url"] != e.srv.URL+"/daytona/toolbox" {
		t.Fatalf("toolbox-proxy-url: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/sandbox/demo/ports/8080/preview-url", nil)
	if p := decode[PreviewURL](t, b); code != 200 || p.SandboxID != sb.ID || !strings.HasPrefix(p.URL, "http://"+sb.ID+"-8080.") {
		t.Fatalf("preview-url: %d %s", code, b)
	}
	code, b = e.do("DELETE", "/daytona/sandbox/demo", nil)
	if s := decode[Sandbox](t, b); code != 200 || s.State != "destroyed" {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, _ = e.do("GET", "/daytona/sandbox/demo", nil); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
	// The name is free again.
	e.create(map[string]any{"name": "demo"})
}

func TestCreateInput(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		body any
		code int
		msg  string
	}{
		{map[string]any{"name": "bad name!"}, 400, "invalid name"},
		// This service builds no images (no image builder).
		{map[string]any{"buildInfo": map[string]any{"dockerfileContent": "FROM a\nRUN b\n"}}, 501, "builds are not available"},
		{map[string]any{"snapshot": "nope"}, 400, "nope"},
		{map[string]any{"buildInfo": map[string]any{"dockerfileContent": "FROM missing:image\n"}}, 400, "missing:image"},
		{`{"name": `, 400, "malformed"},
	}
	for _, c := range cases {
		code, b := e.do("POST", "/daytona/sandbox", c.body)
		body := decode[ErrorBody](t, b)
		if code != c.code || body.StatusCode != c.code || !strings.Contains(body.Message, c.msg) {
			t.Errorf("create %v: %d %s; want %d containing %q", c.body, code, b, c.code, c.msg)
		}
	}
	if n := e.rt.count(t); n != 0 {
		t.Fatalf("refused creates left %d containers", n)
	}
	// An image that exists, and a snapshot (template) that does.
	if sb := e.create(map[string]any{"buildInfo": map[string]any{"dockerfileContent": "FROM sandpit/base:test\n"}}); sb.Snapshot != "sandpit/base:test" {
		t.Fatalf("image create: %+v", sb)
	}
	if sb := e.create(map[string]any{"snapshot": "base"}); sb.Snapshot != "base" {
		t.Fatalf("snapshot create: %+v", sb)
	}
}

func TestConcurrentCreatesWithOneName(t *testing.T) {
	e := newEnv(t)
	const n = 10
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = e.do("POST", "/daytona/sandbox", map[string]any{"name": "race"})
		}()
	}
	wg.Wait()
	won := 0
	for _, c := range codes {
		switch c {
		case 200:
			won++
		case 409:
		default:
			t.Fatalf("unexpected status %d", c)
		}
	}
	if won != 1 || e.rt.count(t) != 1 {
		t.Fatalf("%d creates won, %d containers; want exactly one", won, e.rt.count(t))
	}
}
