package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// newResetCommand is `reset`: remove a data directory of `up`.
func newResetCommand() *cobra.Command {
	var dataDir string
	if home, err := os.UserHomeDir(); err == nil {
		dataDir = filepath.Join(home, ".jobkeeper")
	}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove the data directory of jobkeeper up: every object, certificate, log and pod file",
		Long: `Remove the data directory of jobkeeper up (--data-dir, default ~/.jobkeeper), so that the next
up starts from nothing: etcd's data (every object), the certificates, the logs, the default
kubeconfig and the node agent's pod files. There is no undo.

It refuses while a jobkeeper up uses the directory, and refuses a directory that holds anything
jobkeeper does not create there, or a file system mounted under it. It stops no process and
removes nothing outside the directory; a kubeconfig written elsewhere with --kubeconfig-out keeps
its jobkeeper context, which the next up replaces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir must be set (no home directory to default to)")
			}
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("--data-dir %s: %w", dataDir, err)
			}
			removed, err := controlplane.Reset(abs)
			out := cmd.OutOrStdout()
			for _, path := range removed {
				fmt.Fprintf(out, "Removed %s\n", path)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of jobkeeper up to remove.")
	return cmd
}
