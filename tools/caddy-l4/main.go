// Command caddy is Caddy with the caddy-l4 (layer4) app compiled in. It lives
// in a module of its own so that the main module's dependencies do not grow
// Caddy's; scripts/build-caddy-l4.sh builds it once per go.sum and caches the
// binary outside the checkout, for the tests of the Caddy router's TCP routes.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// The standard modules, as in the official build.
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	// The layer4 app and its handlers and matchers.
	_ "github.com/mholt/caddy-l4"
)

func main() {
	caddycmd.Main()
}
