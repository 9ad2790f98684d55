package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sandpit-dev/sandpit/client"
)

// watchTemplateBuild says on w, before a create of template, that the
// create will wait for the template's image when the daemon's status shows
// it being built, and then each step the build reaches until stop is
// called; waiting says whether it does. Only the admin may read the
// status: for anyone else, and when nothing is being built, it says
// nothing.
func watchTemplateBuild(ctx context.Context, c *client.Client, w io.Writer, template string) (stop func(), waiting bool) {
	st, err := c.Status(ctx)
	if err != nil {
		return func() {}, false
	}
	progress, building := st.AwaitedBuilds[template]
	if !building {
		return func() {}, false
	}
	fmt.Fprintf(w, "waiting for template %s's image %s (building, %s)\n", template, st.AwaitedTemplates[template], progress)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for last := progress; ; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			st, err := c.Status(ctx)
			if err != nil {
				continue
			}
			now, building := st.AwaitedBuilds[template]
			if !building {
				return
			}
			if now != last && ctx.Err() == nil {
				fmt.Fprintf(w, "waiting for template %s's image (building, %s)\n", template, now)
				last = now
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}, true
}
