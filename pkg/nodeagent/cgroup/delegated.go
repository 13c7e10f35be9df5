package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	libcontainercgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// A user other than root writes cgroups only where they were delegated to
// it: on cgroup v2, a subtree it owns, as systemd gives one to a user's
// services and scopes with Delegate=yes (`systemd-run --user --scope -p
// Delegate=yes jobkeeper up`); on v1, directories an administrator made
// and handed over in every hierarchy (cgcreate -a/-t). The agent's root is
// then below its own cgroup (DefaultRoot), and New fails, saying what is
// missing, where it is not.

// agentLeafSuffix names the cgroup a delegated v2 agent moves itself to,
// beside its root: the kernel lets a v2 cgroup give controllers to its
// children only while it holds no process itself.
const agentLeafSuffix = ".agent"

// AgentLeaf is the cgroup (as a cgroupfs path) a delegated agent whose
// root is root moves itself into on cgroup v2; "" elsewhere.
func AgentLeaf(root string) string {
	if !libcontainercgroups.IsCgroup2UnifiedMode() || os.Geteuid() == 0 {
		return ""
	}
	return root + agentLeafSuffix
}

// delegationAdvice says how a user gets a delegated cgroup.
func delegationAdvice(unified bool) string {
	if unified {
		return "start it in a delegated cgroup of its own, e.g. systemd-run --user --scope -p Delegate=yes jobkeeper up"
	}
	return "on cgroup v1 an administrator delegates one, in every hierarchy, below the user's own (cgcreate -a USER -t USER -g '*:PATH', then start it there)"
}

// prepareDelegated readies the delegated cgroup that holds root for a
// user other than root. On v2 the agent's own cgroup, root's parent, must
// be writable and have the memory and cpu controllers; the agent moves
// itself into a leaf beside root and gives the controllers to the
// children. On v1 nothing is prepared: making root's cgroups in every
// hierarchy (New) is the test, and fails with permission denied where
// they were not delegated.
func prepareDelegated(unified bool, root string) error {
	if !unified {
		return nil
	}
	const mnt = "/sys/fs/cgroup"
	parent := filepath.Join(mnt, path.Dir(root))
	if unix.Access(filepath.Join(parent, "cgroup.subtree_control"), unix.W_OK) != nil ||
		unix.Access(filepath.Join(parent, "cgroup.procs"), unix.W_OK) != nil {
		return fmt.Errorf("its cgroup %s is not delegated to it: %s", path.Dir(root), delegationAdvice(true))
	}
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return err
	}
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range []string{"memory", "cpu"} {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the %s controllers are not delegated to its cgroup %s (it has %q; systemd delegates cpu with Delegate=cpu memory pids, or user@.service's Delegate=)",
			strings.Join(missing, " and "), path.Dir(root), strings.Join(have, " "))
	}
	leaf := filepath.Join(mnt, AgentLeaf(root))
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// The whole process, every thread.
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("moving the agent to %s: %w", AgentLeaf(root), err)
	}
	var enable []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if slices.Contains(have, c) {
			enable = append(enable, "+"+c)
		}
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
		// Other processes share the cgroup: go back to where it was.
		_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		_ = os.Remove(leaf)
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("other processes share its cgroup %s: %s", path.Dir(root), delegationAdvice(true))
		}
		return fmt.Errorf("giving the controllers to the children of %s: %w", path.Dir(root), err)
	}
	return nil
}
