package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// The kubelet's cgroupfs manager gives a cgroup one name in every v1
// hierarchy, and the agent's root is named after this process's memory
// cgroup (DefaultRoot). Where the process sits elsewhere in another
// hierarchy (a container runtime that only places it in a memory cgroup,
// for one), the manager makes the directories above the root there too.
// They are the agent's to remove with its root.
//
// aboveRoots counts, per such directory this process made, the managers
// of this process below it, so that only the last one removes it (no agent
// of this process finds its parent gone while it makes its root). One that
// another process's agent also uses (tests of several packages at once) is
// removed by whichever of them made it, when it is empty by then; else it
// stays, empty. Directories that existed before are never removed: an
// administrator's (cgcreate -g memory,cpu:/jk, then up in memory:/jk) are
// theirs.
var aboveRoots = struct {
	sync.Mutex
	users map[string]int
}{users: map[string]int{}}

// claimAbove records the directories above root, in each hierarchy of
// mounts, that do not exist yet or that another manager of this process
// made, below the hierarchy's root and not this process's own cgroup there
// (own, by mount point) or above it: those releaseAbove removes.
func claimAbove(mounts []string, root string, own map[string]string) []string {
	aboveRoots.Lock()
	defer aboveRoots.Unlock()
	var claimed []string
	for _, mp := range mounts {
		for dir := filepath.Dir(filepath.Clean("/" + root)); dir != "/"; dir = filepath.Dir(dir) {
			if self, ok := own[mp]; ok && isWithin(self, dir) {
				break
			}
			p := filepath.Join(mp, dir)
			if _, err := os.Stat(p); aboveRoots.users[p] == 0 && err == nil {
				continue
			}
			aboveRoots.users[p]++
			claimed = append(claimed, p)
		}
	}
	return claimed
}

// isWithin reports whether cgroup path p is dir or below it.
func isWithin(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// releaseAbove gives up dirs (claimAbove's) and removes, deepest first,
// those no other manager of this process claims; one that holds another
// process's cgroups stays.
func releaseAbove(dirs []string) error {
	aboveRoots.Lock()
	defer aboveRoots.Unlock()
	sorted := append([]string(nil), dirs...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	var errs []error
	for _, dir := range sorted {
		if aboveRoots.users[dir]--; aboveRoots.users[dir] > 0 {
			continue
		}
		delete(aboveRoots.users, dir)
		err := os.Remove(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
