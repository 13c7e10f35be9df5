package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/atomicfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// A pod with hostUsers: false gets, as from the kubelet's user namespace
// manager, a range of 65536 host ids of its own, the same for all its
// containers and for its whole life: the lowest free multiple of 65536
// from 65536 on (the kubelet's default when no "kubelet" user has
// subordinate ids), recorded in the pod's directory (<pod dir>/userns, the
// kubelet's JSON) before any container uses it, so that an agent that
// restarts gives the pod the same range and no other pod's. The range is
// free again once the pod's directory is removed.

const (
	// idsPerPod is the length of a pod's range (the kubelet's default
	// userNamespaces.idsPerPod).
	idsPerPod = 65536
	// idRangeBlocks is how many ranges are given: those after the first
	// (0 to 65535, the host's own users) and before the last, whose top
	// id, 4294967295, is no id (-1).
	idRangeBlocks = 1<<32/idsPerPod - 2
	// usernsFile is the record in the pod's directory.
	usernsFile = "userns"
)

// usernsRecord is the kubelet's record of a pod's mappings.
type usernsRecord struct {
	UIDMappings []usernsMapping `json:"uidMappings"`
	GIDMappings []usernsMapping `json:"gidMappings"`
}

// usernsMapping is one line of a record.
type usernsMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// idRanges are the pods' ranges.
type idRanges struct {
	mu sync.Mutex
	// byBlock is the pod holding each range (its first id / idsPerPod).
	byBlock map[uint32]types.UID
	// byPod is each pod's range.
	byPod map[types.UID]uint32
}

func newIDRanges() *idRanges {
	return &idRanges{byBlock: map[uint32]types.UID{}, byPod: map[types.UID]uint32{}}
}

// forPod returns the range of pod uid, whose directory is dir: the one
// recorded there, or a new one, recorded first.
func (r *idRanges) forPod(uid types.UID, dir string) (*runtime.IDRange, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.byPod[uid]; ok {
		return rangeOf(b), nil
	}
	if b, ok, err := readUsernsRecord(dir); err != nil {
		return nil, err
	} else if ok {
		if err := r.take(uid, b); err != nil {
			return nil, err
		}
		return rangeOf(b), nil
	}
	for b := uint32(1); b <= idRangeBlocks; b++ {
		if _, used := r.byBlock[b]; used {
			continue
		}
		if err := writeUsernsRecord(dir, b); err != nil {
			return nil, err
		}
		_ = r.take(uid, b)
		return rangeOf(b), nil
	}
	return nil, errors.New("every range of user namespace ids is in use by another pod")
}

// take records that pod uid holds range b.
func (r *idRanges) take(uid types.UID, b uint32) error {
	if other, used := r.byBlock[b]; used && other != uid {
		return fmt.Errorf("the pod's user namespace ids %d-%d, recorded in its directory, are another pod's (%s)", b*idsPerPod, (b+1)*idsPerPod-1, other)
	}
	r.byBlock[b], r.byPod[uid] = uid, b
	return nil
}

// release frees the range of pod uid, whose directory is gone.
func (r *idRanges) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.byPod[uid]; ok {
		delete(r.byPod, uid)
		delete(r.byBlock, b)
	}
}

// recover takes the ranges recorded in the pods' directories under
// podsDir, at the agent's start; a record it cannot read is left to the
// pod's next start, which then fails with the reason.
func (r *idRanges) recover(podsDir string) {
	entries, _ := os.ReadDir(podsDir)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		if b, ok, err := readUsernsRecord(filepath.Join(podsDir, e.Name())); err == nil && ok {
			_ = r.take(types.UID(e.Name()), b)
		}
	}
}

// rangeOf is range b.
func rangeOf(b uint32) *runtime.IDRange {
	return &runtime.IDRange{HostID: b * idsPerPod, Length: idsPerPod}
}

// readUsernsRecord reads the range recorded in the pod directory dir:
// false when there is none; an error when it is not one this agent gives
// (the same single range for users and groups, at a multiple of 65536).
func readUsernsRecord(dir string) (uint32, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, usernsFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the pod's user namespace record: %w", err)
	}
	var rec usernsRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return 0, false, fmt.Errorf("the pod's user namespace record %s: %w", filepath.Join(dir, usernsFile), err)
	}
	if len(rec.UIDMappings) != 1 || len(rec.GIDMappings) != 1 || rec.UIDMappings[0] != rec.GIDMappings[0] {
		return 0, false, fmt.Errorf("the pod's user namespace record %s does not map one range of users and the same of groups", filepath.Join(dir, usernsFile))
	}
	m := rec.UIDMappings[0]
	if m.ContainerID != 0 || m.Length != idsPerPod || m.HostID%idsPerPod != 0 || m.HostID == 0 || m.HostID/idsPerPod > idRangeBlocks {
		return 0, false, fmt.Errorf("the pod's user namespace record %s maps %d ids from %d to %d: not a range of %d at a multiple of it", filepath.Join(dir, usernsFile), m.Length, m.ContainerID, m.HostID, idsPerPod)
	}
	return m.HostID / idsPerPod, true, nil
}

// writeUsernsRecord records range b in the pod directory dir, durably.
func writeUsernsRecord(dir string, b uint32) error {
	m := usernsMapping{HostID: b * idsPerPod, ContainerID: 0, Length: idsPerPod}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("recording the pod's user namespace: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, usernsFile), usernsRecord{UIDMappings: []usernsMapping{m}, GIDMappings: []usernsMapping{m}}); err != nil {
		return fmt.Errorf("recording the pod's user namespace: %w", err)
	}
	return nil
}

// hostUsersFalse reports a pod that asks for a user namespace of its own.
func hostUsersFalse(pod *corev1.Pod) bool {
	return pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
}

// userNamespaces reports whether the agent gives a pod with hostUsers:
// false a user namespace of its own (as root, where its runtime can), and
// why not.
func (a *Agent) userNamespaces() (bool, string) {
	if a.euid != 0 {
		return false, ""
	}
	u, ok := a.runtime.(runtime.UserNamespacer)
	if !ok {
		return false, "its runtime has none"
	}
	return u.UserNamespaces()
}

// podUserNamespace is the pod's range when it asks for a user namespace
// (hostUsers: false) and the agent is root; nil otherwise (as another
// user every sandbox has one anyway). As root without user namespaces
// the pod is refused before it gets here (DecideFeatures); should a
// container get here anyway, it fails rather than run as the host's root.
func (a *Agent) podUserNamespace(pod *corev1.Pod) (*runtime.IDRange, error) {
	if !hostUsersFalse(pod) || a.euid != 0 {
		return nil, nil
	}
	if ok, why := a.userNamespaces(); !ok {
		return nil, &podconfig.CreateError{Msg: "can't set `spec.hostUsers: false`, runtime does not support user namespaces: " + why}
	}
	return a.idRanges.forPod(pod.UID, a.podDir(pod.UID))
}
