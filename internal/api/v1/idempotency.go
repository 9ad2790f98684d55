package v1

import "github.com/sandpit-dev/sandpit/internal/api"

// keyScope is the native API's name in the idempotency claims' scopes
// ("v1:<pattern>@owner:<owner>"), under which earlier daemons stored theirs.
const keyScope = "v1"

// keys binds the daemon's Idempotency-Key layer to the native API: its keys
// are 1-255 printable ASCII characters and its errors the native shape.
// Which routes are keyed is declared where each is registered
// (Routes.HandleKeyed). Exec is left out on purpose: replaying a command's
// output instead of running it is rarely what a caller means. File writes
// and the agent proxy stream, so they are idempotent by nature or not
// replayable. POST /v1/tokens is left out too (see adminRoutes).
func keys(idem *api.Idempotency) api.KeyWrapper {
	return idem.For(keyScope, api.KeyPrintable, api.WriteError)
}
