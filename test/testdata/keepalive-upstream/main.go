// Command keepalive-upstream is the keep-alive upstream of
// BenchmarkProxyPeers: a static HTTP server, built without cgo and copied
// into a sandbox, that answers every GET with the same 1 KiB body and keeps
// its connections open. busybox httpd, the other upstream, closes every
// connection, so a proxy in front of it pays for a TCP handshake per
// request; in front of this one, a proxy's own cost per request shows.
package main

import (
	"bytes"
	"flag"
	"log"
	"net/http"
	"strconv"
	"time"
)

func main() {
	listen := flag.String("listen", ":8081", "address to serve on")
	flag.Parse()
	body := bytes.Repeat([]byte("x"), 1024)
	size := strconv.Itoa(len(body))
	srv := &http.Server{
		Addr: *listen,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", "text/plain")
			h.Set("Content-Length", size)
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		// Longer than any benchmark round: the proxies' pooled
		// connections stay open between rounds.
		IdleTimeout: 10 * time.Minute,
	}
	log.Fatal(srv.ListenAndServe())
}
