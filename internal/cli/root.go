package cli

import (
	goflag "flag"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/version"
)

// AddKlogFlags adds klog's -v and --vmodule to cmd and its subcommands;
// --vmodule, for debugging one file's logs, is accepted but not listed.
func AddKlogFlags(cmd *cobra.Command) {
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *goflag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" {
			cmd.PersistentFlags().AddGoFlag(f)
		}
	})
	cmd.PersistentFlags().Lookup("v").Usage = "Log verbosity (0: default; 2: state changes; 4: per-sync detail)."
	_ = cmd.PersistentFlags().MarkHidden("vmodule")
}

// PrintVersion writes the version of jobkeeper and of the Kubernetes release
// it embeds, one line, as `version` and `jobkeeper --version` print it.
func PrintVersion(w io.Writer) error {
	_, err := io.WriteString(w, version.Get().String()+"\n")
	return err
}

// NewVersionCommand is `version`.
func NewVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of jobkeeper and of the Kubernetes components it embeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return PrintVersion(cmd.OutOrStdout())
		},
	}
}
