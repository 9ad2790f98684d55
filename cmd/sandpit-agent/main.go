// Command sandpit-agent is the in-sandbox agent on its own: PID 1 of every
// sandbox, linking internal/agent and nothing of the daemon (no engine
// client, store, cluster, router or metrics), so that the memory it keeps in
// each sandbox is the agent's and not the daemon's. scripts/build.sh builds
// it and embeds it into the sandpit executable (internal/agentbin), which
// stays the one file to install.
//
// Containers run it as "<agent> agent [flags]", the command line the full
// sandpit executable's hidden agent subcommand understands, so a sandbox
// runs the same whichever of the two its daemon mounted.
package main

import (
	"context"
	"os"

	"github.com/sandpit-dev/sandpit/internal/agent"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	os.Exit(agent.Main(context.Background(), args))
}
