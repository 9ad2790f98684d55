package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

const (
	// eventsRejoin is how often the merged stream looks for members whose
	// stream it does not have (a member that joined, came back, or whose
	// stream broke).
	eventsRejoin = time.Second
	// eventsSubscribeWait bounds how long the merged stream waits for the
	// other members to confirm their subscriptions before it tells the
	// client it is subscribed; a member slower than that joins the stream
	// when it answers.
	eventsSubscribeWait = 5 * time.Second
	eventsHeartbeat     = 15 * time.Second
)

// sseBlock is one Server-Sent Events block, relayed whole.
type sseBlock struct {
	node       string
	data       []byte
	subscribed bool // the source's ": subscribed" comment
}

// serveEvents answers GET /v1/events for the whole cluster: this node's own
// stream and every other live member's (fetched over the cluster port as
// the principal this node authenticated, which each member scopes as it
// does its own clients), merged one whole event at a time.
func (g *Gateway) serveEvents(w http.ResponseWriter, r *http.Request, local http.Handler, p sandpit.Principal, client *http.Client) {
	pj, _ := json.Marshal(p)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	blocks := make(chan sseBlock, 256)
	ended := make(chan string, 16)
	active := map[string]context.CancelFunc{}
	start := func(node string) {
		sctx, stop := context.WithCancel(ctx)
		active[node] = stop
		go func() {
			defer stop()
			var err error
			if node == g.node {
				err = g.localEvents(sctx, r, local, p, node, blocks)
			} else {
				err = g.remoteEvents(sctx, client, r, node, pj, blocks)
			}
			if err != nil && sctx.Err() == nil {
				g.log.Debug("cluster: event stream of a member ended", "member", node, "err", err)
			}
			select {
			case ended <- node:
			case <-ctx.Done():
			}
		}()
	}
	startMissing := func() {
		for _, m := range g.cl.Peers() {
			if m.State != "alive" || m.Meta.Raft == "" {
				continue
			}
			if _, ok := active[m.Name]; !ok {
				start(m.Name)
			}
		}
	}
	startMissing()
	if _, ok := active[g.node]; !ok {
		// Gossip may not list this node yet; its own stream is never
		// missing.
		start(g.node)
	}

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	// Events that arrive while the others subscribe are held, then sent
	// after the ": subscribed" line, in arrival order.
	var held [][]byte
	waiting := len(active)
	deadline := time.NewTimer(eventsSubscribeWait)
	defer deadline.Stop()
	for waiting > 0 {
		select {
		case <-ctx.Done():
			return
		case b := <-blocks:
			if b.subscribed {
				waiting--
			} else {
				held = append(held, b.data)
			}
		case node := <-ended:
			delete(active, node)
			waiting--
		case <-deadline.C:
			waiting = 0
		}
	}
	if _, err := fmt.Fprint(w, ": subscribed\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	for _, b := range held {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}

	rejoin := time.NewTicker(eventsRejoin)
	defer rejoin.Stop()
	beat := time.NewTicker(eventsHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-blocks:
			if b.subscribed {
				continue
			}
			if _, err := w.Write(b.data); err != nil || rc.Flush() != nil {
				return
			}
		case node := <-ended:
			delete(active, node)
			if node == g.node {
				// This node's own stream ends when it shuts down or
				// drops the stream as too slow: end the client's, which
				// reconnects, as on a single node.
				return
			}
		case <-rejoin.C:
			startMissing()
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// localEvents runs this node's own event handler in process, as the
// principal p, and relays its blocks.
func (g *Gateway) localEvents(ctx context.Context, r *http.Request, local http.Handler, p sandpit.Principal, node string, out chan<- sseBlock) error {
	pr, pw := io.Pipe()
	go func() {
		local.ServeHTTP(&pipeResponse{h: http.Header{}, w: pw}, r.Clone(cluster.WithForwarded(ctx, p)))
		_ = pw.Close()
	}()
	// Closing the reader makes a handler blocked on a write return.
	defer pr.Close()
	return relaySSE(ctx, pr, node, out)
}

// remoteEvents subscribes to a member's own stream over the cluster port.
func (g *Gateway) remoteEvents(ctx context.Context, client *http.Client, r *http.Request, node string, principal []byte, out chan<- sseBlock) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+node+r.URL.RequestURI(), nil)
	if err != nil {
		return err
	}
	req.Host = r.Host
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(cluster.HeaderForwardedBy, g.node)
	req.Header.Set(cluster.HeaderPrincipal, string(principal))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return relaySSE(ctx, resp.Body, node, out)
}

// relaySSE splits an event stream into its blocks (the lines up to a blank
// line) and sends each event whole; comments are dropped, except that the
// ": subscribed" comment is reported.
func relaySSE(ctx context.Context, body io.Reader, node string, out chan<- sseBlock) error {
	br := bufio.NewReader(body)
	var (
		block   strings.Builder
		comment = true
	)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line != "\n" && line != "\r\n" {
			block.WriteString(line)
			comment = comment && strings.HasPrefix(line, ":")
			continue
		}
		if block.Len() == 0 {
			continue
		}
		b := sseBlock{node: node}
		switch {
		case comment && strings.HasPrefix(block.String(), ": subscribed"):
			b.subscribed = true
		case comment:
			block.Reset()
			continue
		default:
			block.WriteString("\n")
			b.data = []byte(block.String())
		}
		block.Reset()
		comment = true
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pipeResponse is the ResponseWriter of the in-process local stream: what
// the handler writes is read from the pipe's other end.
type pipeResponse struct {
	h http.Header
	w *io.PipeWriter
}

func (p *pipeResponse) Header() http.Header         { return p.h }
func (p *pipeResponse) WriteHeader(int)             {}
func (p *pipeResponse) Write(b []byte) (int, error) { return p.w.Write(b) }

// Flush makes the handler's flushes succeed; every write already reaches
// the reader.
func (p *pipeResponse) Flush() {}
