package main

import (
	"github.com/spf13/cobra"

	"jobkeeper.dev/jobkeeper/internal/cli"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "jobkeeper",
		Short:         "Kubernetes Job and TTL-after-finished controllers, with an embedded control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cli.AddKlogFlags(root)
	root.AddCommand(newUpCommand(), cli.NewControllerCommand("controller"), cli.NewVersionCommand())
	return root
}
