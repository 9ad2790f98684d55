package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	sandpitapi "github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// TestPreviewRouterForwardsToTheOwner runs two real nodes: n2's cluster port
// serves a stand-in preview proxy, and n1's gateway Preview must hand it every
// preview of a sandbox placed on n2 (both label forms, custom domains), with
// the Host, the client's address, streaming and WebSocket-style upgrades
// intact, and serve everything else itself.
func TestPreviewRouterForwardsToTheOwner(t *testing.T) {
	keys := testKeys(t, "a cluster key of enough bytes")
	n1, g1 := startNode(t, "n1", keys, 2, nil)
	n2, _ := startNode(t, "n2", keys, 2, []string{g1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []*cluster.Cluster{n1, n2} {
		if err := n.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "n1 to know n2's cluster port", 20*time.Second, func() bool { return knowsClusterPort(n1, "n2") })
	rep := n1.Replica()
	for _, r := range []cluster.Reservation{{SandboxID: "theirs", Node: "n2"}, {SandboxID: "mine", Node: "n1"}, {SandboxID: "pending"}} {
		if err := rep.Reserve(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := rep.AddHostname(ctx, "theirs", "app.example.test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1 to apply", 10*time.Second, func() bool {
		_, ok := n1.Replica().FSM().PlacementByHostname("app.example.test")
		return ok
	})

	// n2's preview proxy: it names itself, the host and the client it sees,
	// streams /stream in two parts and echoes what follows an upgrade.
	release := make(chan struct{})
	owner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for h := range r.Header {
			if strings.HasPrefix(h, "Sandpit-") {
				http.Error(w, "cluster header leaked: "+h, http.StatusInternalServerError)
				return
			}
		}
		switch r.URL.Path {
		case "/stream":
			_, _ = io.WriteString(w, "first\n")
			http.NewResponseController(w).Flush()
			<-release
			_, _ = io.WriteString(w, "second\n")
		case "/upgrade":
			if r.Header.Get("Upgrade") != "echo" {
				http.Error(w, "want an upgrade", http.StatusBadRequest)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			line, _ := brw.ReadString('\n')
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		default:
			fmt.Fprintf(w, "n2 host=%s client=%s", r.Host, r.RemoteAddr)
		}
	})
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := cluster.Forwarded(r.Context())
		if r.Header.Get(cluster.HeaderSignedProbe) != "" {
			// n2 runs the sandbox that signed "theirs".
			if r.URL.Query().Get("signature") == "theirs" {
				w.WriteHeader(http.StatusNoContent)
			} else {
				w.WriteHeader(http.StatusNotFound)
			}
			return
		}
		fmt.Fprintf(w, "n2 api %s admin=%v scopes=%d token=%s tls=%v", r.URL.Path, p.Admin, len(p.Scopes), r.Header.Get("X-Access-Token"), r.TLS != nil)
	})
	go n2.ServeForwarded(sctx, ForwardedSplit(api, owner))

	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "n1") })
	front := httptest.NewServer(New(n1).Preview(local, PreviewConfig{Domain: "sandpit.test", SandboxIDs: func(p sandpit.PreviewHost) []string {
		label := p.Label
		if id, rest, ok := strings.Cut(label, "-"); ok && rest == "8080" {
			return []string{id}
		}
		if port, id, ok := strings.Cut(label, "-"); ok && port == "8080" {
			return []string{id}
		}
		return nil
	}}))
	defer front.Close()

	get := func(host, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+path, nil)
		req.Host = host
		req.Header.Set(cluster.HeaderPrincipal, `{"Admin":true}`) // a client's, dropped
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tt := range []struct{ host, want string }{
		{"theirs-8080.sandpit.test", "n2 host=theirs-8080.sandpit.test client=127.0.0.1:"},
		{"8080-theirs.sandpit.test:1234", "n2 host=8080-theirs.sandpit.test:1234 client=127.0.0.1:"},
		{"App.Example.Test.", "n2 host=App.Example.Test. client=127.0.0.1:"},
		{"mine-8080.sandpit.test", "n1"},
		{"pending-8080.sandpit.test", "n1"},
		{"nobody-8080.sandpit.test", "n1"},
		{"theirs-8080.other.test", "n1"},
		{"x.theirs-8080.sandpit.test", "n1"},
	} {
		code, body := get(tt.host, "/")
		if code != http.StatusOK || !strings.HasPrefix(body, tt.want) {
			t.Errorf("%s: %d %q, want %q", tt.host, code, body, tt.want)
		}
	}
	// The client n2 sees is the one n1 saw, not n1's cluster connection.
	var clientAddr string
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			clientAddr = c.LocalAddr().String()
		}
		return c, err
	}}}
	creq, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL, nil)
	creq.Host = "theirs-8080.sandpit.test"
	if cres, err := hc.Do(creq); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(cres.Body)
		cres.Body.Close()
		if !strings.HasSuffix(string(b), " client="+clientAddr) {
			t.Errorf("owner saw %q, want the client %s", b, clientAddr)
		}
	}

	// A request that arrived forwarded is served here, never forwarded again.
	fw := httptest.NewRequest(http.MethodGet, "/", nil)
	fw.Host = "theirs-8080.sandpit.test"
	fw = fw.WithContext(cluster.WithForwarded(fw.Context(), sandpit.Principal{}))
	if got := New(n1).previewOwner(fw, sandpit.ParsePreviewHost(fw.Host, "sandpit.test"), func(sandpit.PreviewHost) []string { return []string{"theirs"} }); got != "" {
		t.Errorf("a forwarded request would go to %q", got)
	}

	// The E2B gateway takes no API credential: its calls go to the owner
	// as the zero principal, with the sandbox's own token untouched.
	router := httptest.NewServer(New(n1).API(local, Config{Routes: surfacesTable(), WriteError: sandpitapi.WriteError, Authenticate: func(*http.Request) (sandpit.Principal, error) {
		return sandpit.Principal{}, errors.New("no credential")
	}}))
	defer router.Close()
	for _, tt := range []struct{ path, id, want string }{
		{"/e2b/envd/health", "theirs", "n2 api /e2b/envd/health admin=false scopes=0 token=tok tls=false"},
		{"/files", "theirs", "n2 api /files admin=false scopes=0 token=tok tls=false"},
		// A signed file URL goes to the node whose sandbox signed it.
		{"/files?signature=theirs", "", "n2 api /files admin=false scopes=0 token=tok tls=false"},
		{"/files?signature=nobody", "", "n1"},
		{"/e2b/envd/health", "mine", "n1"},
		{"/e2b/envd/health", "pending", "n1"},
		{"/e2b/envd/health", "", "n1"},
		// Without a credential nothing else is forwarded.
		{"/v1/sandboxes/theirs", "", "n1"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, router.URL+tt.path, nil)
		req.Header.Set("E2b-Sandbox-Id", tt.id)
		req.Header.Set("X-Access-Token", "tok")
		// A client's copies of the cluster's own markers change nothing.
		req.Header.Set(cluster.HeaderPreview, "1")
		req.Header.Set(cluster.HeaderSignedProbe, "1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != tt.want {
			t.Errorf("%s for %q: %q, want %q", tt.path, tt.id, b, tt.want)
		}
	}

	// A streamed response arrives part by part.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/stream", nil)
	req.Host = "theirs-8080.sandpit.test"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); line != "first\n" || err != nil {
		t.Fatalf("first part: %q %v", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("second part: %q", rest)
	}
	res.Body.Close()

	// An upgraded connection carries bytes both ways.
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /upgrade HTTP/1.1\r\nHost: theirs-8080.sandpit.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	cr := bufio.NewReader(conn)
	upRes, err := http.ReadResponse(cr, nil)
	if err != nil || upRes.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", upRes, err)
	}
	fmt.Fprintf(conn, "hello\n")
	if line, err := cr.ReadString('\n'); line != "echo hello\n" || err != nil {
		t.Fatalf("after the upgrade: %q %v", line, err)
	}
}
