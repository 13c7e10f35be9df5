package main

import (
	goflag "flag"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/version"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "jobkeeper",
		Short:         "Kubernetes Job and TTL-after-finished controllers, with an embedded control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// klog's flags (-v, --vmodule, ...) on every command.
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *goflag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" {
			root.PersistentFlags().AddGoFlag(f)
		}
	})
	root.AddCommand(newUpCommand(), newControllerCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of jobkeeper and of the Kubernetes components it embeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write([]byte(version.Get().String() + "\n"))
			return err
		},
	}
}
