package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"time"
)

// warnUnresolvable warns when a preview host of domain does not resolve on
// this machine: the URLs the daemon hands out would then fail in every
// program but a browser that special-cases *.localhost. glibc's resolver
// (getent) is asked when it is there, since that is what curl, Node and
// Python use (and what libnss-myhostname extends); Go's own resolver, which
// this static binary has, knows nothing of NSS modules.
func warnUnresolvable(ctx context.Context, domain string, log *slog.Logger) {
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")
	if domain == "" {
		return
	}
	host := "sandpit-probe-8080." + domain
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if getent, lerr := exec.LookPath("getent"); lerr == nil {
		err = exec.CommandContext(ctx, getent, "ahosts", host).Run()
	} else {
		_, err = net.DefaultResolver.LookupHost(ctx, host)
	}
	if err == nil {
		log.Info("preview hosts resolve on this machine", "probe", host)
		return
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return // the daemon is stopping
	}
	hint := "add a wildcard DNS record *." + domain + " pointing at this host"
	if domain == "localhost" || strings.HasSuffix(domain, ".localhost") {
		hint = "install libnss-myhostname (scripts/ensure-names.sh) so that *.localhost resolves for every program"
	}
	log.Warn("preview hosts do not resolve on this machine: their URLs work only in browsers that special-case *.localhost", "probe", host, "fix", hint)
}
