package cli

import (
	goflag "flag"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/version"
)

// AddKlogFlags adds klog's -v and --vmodule to cmd and its subcommands.
func AddKlogFlags(cmd *cobra.Command) {
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *goflag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" {
			cmd.PersistentFlags().AddGoFlag(f)
		}
	})
}

// NewVersionCommand is `version`.
func NewVersionCommand() *cobra.Command {
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
