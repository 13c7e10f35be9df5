package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// DefaultCapabilities is the capability set of a container that asks for
// no other: containerd's default for Linux containers, which the kubelet's
// runtimes give every container that is not privileged.
var DefaultCapabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_NET_RAW",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// allCapabilities names every capability the capability package knows, in
// the form Config.Capabilities takes.
func allCapabilities() []string {
	known := capability.ListKnown()
	out := make([]string, 0, len(known))
	for _, c := range known {
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
}

// ContainerCapabilities returns the capabilities of a container whose
// securityContext adds add and drops drop (names with or without the
// "CAP_" prefix, in any case, "ALL" meaning every one), starting from
// DefaultCapabilities, as containerd computes them: "ALL" in add gives
// every capability, then "ALL" in drop takes every one away, then the
// single names of add are added and those of drop removed. The result is
// sorted and without duplicates. It decides only.
func ContainerCapabilities(add, drop []string) []string {
	set := slices.Clone(DefaultCapabilities)
	if slices.ContainsFunc(add, isAll) {
		set = allCapabilities()
	}
	if slices.ContainsFunc(drop, isAll) {
		set = nil
	}
	for _, c := range add {
		if !isAll(c) {
			set = append(set, capName(c))
		}
	}
	for _, c := range drop {
		if !isAll(c) {
			name := capName(c)
			set = slices.DeleteFunc(set, func(s string) bool { return s == name })
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// isAll reports the name that stands for every capability.
func isAll(c string) bool { return strings.EqualFold(c, "ALL") }

// capName spells a capability as capabilities(7) does: upper case, with
// the "CAP_" prefix.
func capName(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// parseCapabilities turns names into the kernel's numbers. Names the
// capability package does not know, or the running kernel does not have,
// are left out and returned as unknown, as runc ignores them.
func parseCapabilities(names []string) (keep []capability.Cap, unknown []string) {
	last := lastCap()
	byName := map[string]capability.Cap{}
	for _, c := range capability.ListKnown() {
		if c <= last {
			byName["CAP_"+strings.ToUpper(c.String())] = c
		}
	}
	for _, n := range names {
		if c, ok := byName[capName(n)]; ok {
			keep = append(keep, c)
		} else {
			unknown = append(unknown, n)
		}
	}
	return keep, unknown
}

// lastCap is the highest capability the running kernel has, found by
// asking for the bounding set's members until it says there is no such
// capability: the sandbox's /proc may be a container's by then, where
// /proc/sys/kernel/cap_last_cap is not to be trusted nor always present.
func lastCap() capability.Cap {
	c := capability.Cap(0)
	for ; c < 64; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			break
		}
	}
	return c - 1
}

// limitCapabilities lowers the capabilities of the calling thread, which
// must be locked to its goroutine and is about to execute a container's
// process (or fork one), to keep: every other capability leaves the
// bounding set, and the inheritable and ambient sets are emptied. The
// permitted and effective sets stay, so that the thread (or the child it
// forks) can still take the container's user; the execution then gives a
// process running as root exactly keep, and one running as another user
// none but what a file of keep grants (as runc leaves them). An error
// means some capability could not be dropped: the process must not run.
// A thread that holds no capability (a sandbox of a user other than root,
// without namespaces) is left as it is. It uses system calls only: the thread's /proc may be a container's.
func limitCapabilities(keep []capability.Cap) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading the thread's capabilities: %w", err)
	}
	if data[0].Permitted == 0 && data[1].Permitted == 0 {
		// A sandbox of a user other than root without a namespace of its
		// own: its processes hold none already, as any of that user's.
		return nil
	}
	if data[0].Effective&(1<<uint(capability.CAP_SETPCAP)) == 0 {
		return fmt.Errorf("cannot limit the container's capabilities: the sandbox lacks CAP_SETPCAP")
	}
	last := lastCap()
	for c := capability.Cap(0); c <= last; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %s from the bounding set: %w", c, err)
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil || in != 0 {
			return fmt.Errorf("capability %s is still in the bounding set after dropping it (%v)", c, err)
		}
	}
	return clearInheritedCapabilities()
}

// dropAllCapabilities empties the calling thread's permitted, effective
// and inheritable sets (a process that needs none, the pause process).
func dropAllCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping every capability: %w", err)
	}
	return nil
}

// clearInheritedCapabilities empties the calling thread's inheritable and
// ambient sets, keeping its bounding, permitted and effective ones: what
// limitCapabilities does beside the bounding set, for a privileged
// container's process, which keeps every capability the kernel gives
// its user at the execution and no more.
func clearInheritedCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading the thread's capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("emptying the inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("emptying the ambient capabilities: %w", err)
	}
	return nil
}
