package binder

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1alpha2"
)

// Gang scheduling (GangScheduling, alpha in v1.36), as the scheduler's
// GangScheduling plugin decides it on one node: a pod that names a
// PodGroup (spec.schedulingGroup) waits until the PodGroup exists and, for
// a gang policy, until at least minCount of the group's pods exist; then
// the group's pending pods are bound together, in one pass, when enough of
// them fit beside the group's pods already bound to make minCount, or
// none is. Where the scheduler would hold the fitting pods at its Permit
// stage, the binder holds nothing: after PermitTimeout of not fitting the
// pods are reported unschedulable with the scheduler's message, and wait
// again.

// PermitTimeout is how long a gang waits for room before its pods are
// reported unschedulable (the scheduler's GangScheduling permit timeout).
var PermitTimeout = 5 * time.Minute

// gangPlugin names the scheduler plugin in the messages.
const gangPlugin = "GangScheduling"

// groupKey names a PodGroup.
type groupKey = types.NamespacedName

// groupOf is the PodGroup a pod names, if any.
func groupOf(pod *corev1.Pod) (groupKey, bool) {
	g := pod.Spec.SchedulingGroup
	if g == nil || g.PodGroupName == nil || *g.PodGroupName == "" {
		return groupKey{}, false
	}
	return groupKey{Namespace: pod.Namespace, Name: *g.PodGroupName}, true
}

// gang is what one pass knows of a PodGroup with a gang policy.
type gang struct {
	// minCount is the policy's.
	minCount int
	// pending are the group's pods to bind, in the pass's order.
	pending []*corev1.Pod
	// bound counts the group's pods already on the node, not finished.
	bound int
	// handled is set once the pass decided the group.
	handled bool
}

// quorum reports whether enough of the group's pods exist for it to be
// tried at all.
func (g *gang) quorum() bool { return len(g.pending)+g.bound >= g.minCount }

// gangState is the binder's view of gangs, nil when the gate is off.
type gangState struct {
	// podGroups lists PodGroups.
	podGroups schedulinglisters.PodGroupLister
	// waitingSince is when each group first failed to fit (guarded by
	// Binder.mu).
	waitingSince map[groupKey]time.Time
}

// groupPods sorts pending into pods left to the plain path (no group, or a
// group with no gang policy), the gangs, and pods that wait for their
// PodGroup to exist. bound lists the pods on the node.
func (s *gangState) groupPods(pending, bound []*corev1.Pod) (plain []*corev1.Pod, gangs map[groupKey]*gang, err error) {
	gangs = map[groupKey]*gang{}
	policies := map[groupKey]*schedulingv1alpha2.PodGroup{}
	for _, pod := range pending {
		key, ok := groupOf(pod)
		if !ok {
			plain = append(plain, pod)
			continue
		}
		pg, seen := policies[key]
		if !seen {
			pg, err = s.podGroups.PodGroups(key.Namespace).Get(key.Name)
			if apierrors.IsNotFound(err) {
				pg, err = nil, nil
			}
			if err != nil {
				return nil, nil, err
			}
			policies[key] = pg
		}
		switch {
		case pg == nil:
			// Waits for its PodGroup.
		case pg.Spec.SchedulingPolicy.Gang == nil:
			plain = append(plain, pod)
		default:
			g := gangs[key]
			if g == nil {
				g = &gang{minCount: int(pg.Spec.SchedulingPolicy.Gang.MinCount)}
				gangs[key] = g
			}
			g.pending = append(g.pending, pod)
		}
	}
	for _, pod := range bound {
		if key, ok := groupOf(pod); ok && gangs[key] != nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			gangs[key].bound++
		}
	}
	return plain, gangs, nil
}

// forgetGone drops the waits of gangs that have no pending pod any more
// (bound, deleted), so that one coming back waits its full time again.
func (s *gangState) forgetGone(gangs map[groupKey]*gang) {
	for key := range s.waitingSince {
		if gangs[key] == nil {
			delete(s.waitingSince, key)
		}
	}
}

// permitRejection is the scheduler's message for a gang rejected at its
// permit stage after waiting PermitTimeout.
func permitRejection() string {
	return fmt.Sprintf("rejected due to timeout after waiting %v at plugin %s", PermitTimeout, gangPlugin)
}

// placeGang decides gang g, reached at its first pending pod first, in a
// pass that placed used (usedPods pods) so far: its pods that fit now are
// bound together if, with those of the group already bound, they make
// minCount; else none is, and a gang that has waited PermitTimeout is
// reported unschedulable. It returns the pass's new totals.
func (b *Binder) placeGang(ctx context.Context, first *corev1.Pod, g *gang, fits func(*corev1.Pod, Requests, int) fit, bindClaims func(*corev1.Pod, *volumeDecision),
	view *passVolumes, used Requests, usedPods int, toBind []*corev1.Pod) (Requests, int, []*corev1.Pod) {
	key, _ := groupOf(first)
	if !g.quorum() {
		// Not all of it exists yet: not tried (no condition, as the
		// scheduler's PreEnqueue), and its wait for room starts again
		// once it is.
		b.mu.Lock()
		delete(b.gang.waitingSince, key)
		b.mu.Unlock()
		return used, usedPods, toBind
	}
	var placed []*corev1.Pod
	claims := map[*corev1.Pod]*volumeDecision{}
	tryUsed, tryPods := used, usedPods
	for _, pod := range g.pending {
		if tryPods >= b.cfg.MaxPods {
			break
		}
		if f := fits(pod, tryUsed, tryPods); f.ok {
			tryUsed, tryPods = tryUsed.Add(f.requests), tryPods+1
			placed = append(placed, pod)
			if f.claims != nil {
				claims[pod] = f.claims
			}
		}
	}
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	if g.bound+len(placed) >= g.minCount {
		delete(b.gang.waitingSince, key)
		b.mu.Unlock()
		if len(claims) > 0 {
			// As the scheduler binds volumes after the gang's Permit:
			// the members' claims now, the gang in a pass once they are
			// bound (their events bring it), all together still.
			for pod, d := range claims {
				bindClaims(pod, d)
			}
			return used, usedPods, toBind
		}
		for _, pod := range placed {
			view.add(pod)
		}
		return tryUsed, tryPods, append(toBind, placed...)
	}
	since, waiting := b.gang.waitingSince[key]
	if !waiting {
		since = now
		b.gang.waitingSince[key] = now
	}
	left := PermitTimeout - now.Sub(since)
	timedOut := left <= 0
	if timedOut {
		// Rejected; the gang waits again from now.
		b.gang.waitingSince[key], left = now, PermitTimeout
	}
	b.mu.Unlock()
	if timedOut {
		for _, pod := range g.pending {
			b.markUnschedulable(ctx, pod, permitRejection())
		}
	}
	// Looked at again when the time is up, if nothing else wakes it.
	b.queue.AddAfter(bindKey, left)
	return used, usedPods, toBind
}
