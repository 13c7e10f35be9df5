package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"jobkeeper.dev/jobkeeper/internal/cli"
)

func newRootCommand() *cobra.Command {
	dropLeakedFlags()
	var printVersion bool
	root := &cobra.Command{
		Use:           "jobkeeper",
		Short:         "Kubernetes Job and TTL-after-finished controllers, with an embedded control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion {
				return cli.PrintVersion(cmd.OutOrStdout())
			}
			return cmd.Help()
		},
	}
	root.Flags().BoolVar(&printVersion, "version", false, "Print the version (as the version command does) and exit.")
	cli.AddKlogFlags(root)
	root.AddCommand(newUpCommand(), newResetCommand(), cli.NewControllerCommand("controller"), cli.NewVersionCommand(),
		newFollowCommand(), newRunCommand(), newImageCommand(), newMetricsCommand())
	return root
}

// dropLeakedFlags removes component-base's --version from pflag.CommandLine,
// where its verflag package, linked in with kube-apiserver, registers it at
// init. Cobra adds pflag.CommandLine to every command, so it showed in every
// help and shadowed the root's --version; only kube-apiserver's own command
// reads it, and `up` does not run that command.
func dropLeakedFlags() {
	kept := pflag.NewFlagSet(pflag.CommandLine.Name(), pflag.ExitOnError)
	pflag.CommandLine.VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			kept.AddFlag(f)
		}
	})
	pflag.CommandLine = kept
}
