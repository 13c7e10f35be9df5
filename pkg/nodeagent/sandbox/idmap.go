package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// idRange is one line of a user namespace's uid_map or gid_map: the ids
// from first to first+size-1 exist inside it.
type idRange struct {
	// first is the first id inside the namespace.
	first uint64
	// size is how many ids follow it.
	size uint64
}

// namespaceIDs is what the sandbox's user namespace lets its processes be.
type namespaceIDs struct {
	// uids and gids are the mapped ids.
	uids, gids []idRange
	// setgroups is false when /proc/self/setgroups says "deny" (a user
	// namespace whose gid map was written without privilege).
	setgroups bool
}

// readNamespaceIDs reads the current process's user namespace's maps.
func readNamespaceIDs() (namespaceIDs, error) {
	uid, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return namespaceIDs{}, fmt.Errorf("reading the user namespace's uid map: %w", err)
	}
	gid, err := os.ReadFile("/proc/self/gid_map")
	if err != nil {
		return namespaceIDs{}, fmt.Errorf("reading the user namespace's gid map: %w", err)
	}
	sg, err := os.ReadFile("/proc/self/setgroups")
	if err != nil {
		return namespaceIDs{}, fmt.Errorf("reading the user namespace's setgroups: %w", err)
	}
	return namespaceIDs{uids: parseIDMap(string(uid)), gids: parseIDMap(string(gid)), setgroups: strings.TrimSpace(string(sg)) != "deny"}, nil
}

// parseIDMap parses the lines "inside outside size" of a uid_map or
// gid_map.
func parseIDMap(s string) []idRange {
	var out []idRange
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.ParseUint(f[0], 10, 32)
		size, err2 := strconv.ParseUint(f[2], 10, 33)
		if err1 == nil && err2 == nil {
			out = append(out, idRange{first: first, size: size})
		}
	}
	return out
}

// has reports whether id is mapped.
func has(ranges []idRange, id uint32) bool {
	for _, r := range ranges {
		if uint64(id) >= r.first && uint64(id) < r.first+r.size {
			return true
		}
	}
	return false
}

// describe says which ids ranges map, for messages.
func describe(ranges []idRange) string {
	if len(ranges) == 1 && ranges[0].first == 0 && ranges[0].size == 1 {
		return "only 0, the agent's own user"
	}
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		if r.size == 1 {
			parts = append(parts, strconv.FormatUint(r.first, 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r.first, r.first+r.size-1))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// credentialFor returns the credential the container's processes take
// to be id in a namespace that maps ns. The user, the primary group and
// the pod's supplemental groups must all exist there: a container never
// runs as someone else than asked. Groups that only the image's
// /etc/group adds are dropped when unmapped, and none is set when the
// namespace forbids setgroups (the processes then keep the agent's
// groups, which the namespace shows as the overflow group).
func credentialFor(id identity, ns namespaceIDs) (*syscall.Credential, error) {
	const advice = "; run the agent as root, or " + SubIDAdvice + ", or run the container as root (securityContext runAsUser: 0 and runAsGroup: 0, no supplementalGroups)"
	if !has(ns.uids, id.uid) {
		return nil, fmt.Errorf("the container's user is uid %d but the sandbox's user namespace maps uids %s%s", id.uid, describe(ns.uids), advice)
	}
	if !has(ns.gids, id.gid) {
		return nil, fmt.Errorf("the container's group is gid %d but the sandbox's user namespace maps gids %s%s", id.gid, describe(ns.gids), advice)
	}
	for _, g := range id.extra {
		if !has(ns.gids, g) {
			return nil, fmt.Errorf("the container's supplemental group %d is not mapped by the sandbox's user namespace (it maps gids %s)%s", g, describe(ns.gids), advice)
		}
	}
	cred := &syscall.Credential{Uid: id.uid, Gid: id.gid}
	if !ns.setgroups {
		if len(id.extra) > 0 {
			return nil, fmt.Errorf("the container asks for supplemental groups %v but the sandbox's user namespace cannot set groups%s", id.extra, advice)
		}
		cred.NoSetGroups = true
		return cred, nil
	}
	for _, g := range id.groups() {
		if has(ns.gids, g) {
			cred.Groups = append(cred.Groups, g)
		}
	}
	return cred, nil
}
