package main

import (
	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/agent"
)

func agentCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "agent",
		Short:              "Run the in-sandbox agent (PID 1 inside every sandbox)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := agent.Main(cmd.Context(), args); code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
}
