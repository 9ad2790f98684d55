package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/mcp"
)

// mcpCmd serves the MCP tools over stdio to the one client that started
// it (an agent's MCP configuration runs `sandpit mcp`), acting on the
// daemon the client flags and environment name.
func mcpCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol over stdio (tools to create sandboxes, run commands, read and write files, expose ports)",
		Long: "Serve the Model Context Protocol over stdin and stdout, for an MCP client that starts this command. " +
			"Its tools act on the daemon at --addr (SANDPIT_ADDR) with the token of --token-file, SANDPIT_TOKEN or <data-dir>/token, " +
			"as every client command does. The daemon also serves MCP over Streamable HTTP at /mcp. See docs/mcp.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			// stdout carries the protocol: the log goes to stderr.
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			return mcp.ServeStdio(cmd.Context(), c, version, os.Stdin, os.Stdout, log)
		},
	}
}
