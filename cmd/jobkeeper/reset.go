package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
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
jobkeeper does not create there, or a file system mounted under it. Containers that an up killed
with kill -9 (or a crash) left running for the next up to take over are killed with the directory;
no other process is stopped, and nothing outside the directory is removed but the pods' cgroups
that up made (as root); a kubeconfig written
elsewhere with --kubeconfig-out keeps its jobkeeper context, which the next up replaces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir must be set (no home directory to default to)")
			}
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("--data-dir %s: %w", dataDir, err)
			}
			// Read before the directory goes; killed only once it is gone,
			// so that an up still using it keeps its containers.
			left := process.ReadRecorded(filepath.Join(abs, "node", "process-state"))
			// The pods' pinned network namespaces are mounts under the
			// directory, which Reset refuses: they go first, unless an up
			// uses the directory.
			if err := controlplane.CheckDirLock(abs); err != nil {
				return err
			}
			said, err := resetPodNetwork(filepath.Join(abs, "node"))
			if said != "" {
				fmt.Fprintln(cmd.OutOrStdout(), said)
			}
			if err != nil {
				return err
			}
			cgroupRoot := nodeagent.RecordedCgroupRoot(filepath.Join(abs, "node"))
			removed, err := controlplane.Reset(abs)
			out := cmd.OutOrStdout()
			for _, path := range removed {
				fmt.Fprintf(out, "Removed %s\n", path)
			}
			if err == nil {
				if n := process.KillRecorded(left); n > 0 {
					fmt.Fprintf(out, "Killed %d processes of containers left running by a previous up\n", n)
				}
				if cgroupRoot != "" {
					// Once the containers are killed: a cgroup that
					// holds processes cannot be removed.
					if err = cgroup.Remove(cgroupRoot); err != nil {
						err = fmt.Errorf("removing the pods' cgroups below %s: %w", cgroupRoot, err)
					} else {
						fmt.Fprintf(out, "Removed the pods' cgroups below %s\n", cgroupRoot)
					}
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of jobkeeper up to remove.")
	return cmd
}
