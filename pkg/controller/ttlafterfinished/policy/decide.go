package policy

import (
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Verdict is the decision for one finished object that has a TTL: when it
// finished, when it expires and how to delete it.
type Verdict struct {
	// FinishedAt is when the object finished.
	FinishedAt time.Time
	// TTL is the applicable time to live.
	TTL time.Duration
	// Policy names the TTLPolicy that decided; empty when only the
	// object's own TTL applies (a Job's spec.ttlSecondsAfterFinished, or a
	// Pod's annotation with no policy).
	Policy string
	// Failed is true when the object failed rather than succeeded.
	Failed bool
	// DryRun reports instead of deleting.
	DryRun bool
	// Events records a TTLExpired event on the deletion.
	Events bool
	// Propagation is the delete's propagation policy.
	Propagation metav1.DeletionPropagation
}

// ExpireAt is the instant the object may be deleted.
func (v *Verdict) ExpireAt() time.Time { return v.FinishedAt.Add(v.TTL) }

// Remaining is how long until expiry, as seen at now; zero or negative
// means the TTL has expired.
func (v *Verdict) Remaining(now time.Time) time.Duration { return v.ExpireAt().Sub(now) }

// Candidate is a policy that selects an object, with what its rule read and
// the object's own TTL under it (the annotation, else the policy's ownTTL
// field), if any.
type Candidate struct {
	// Policy is the selecting policy.
	Policy *Policy
	// State is what its rule read.
	State Finish
	// Own is the object's own TTL, or nil.
	Own *int32
}

// ttl is the candidate's TTL for the object: its own, else the policy's for
// the outcome; nil when none applies.
func (c *Candidate) ttl() *int32 {
	if c.Own != nil {
		return c.Own
	}
	return c.Policy.TTLFor(c.State.Failed)
}

// Choose applies the precedence rule to the candidates of one object. Only
// candidates whose object finished at a readable time and that have a TTL
// count. An object's own TTL (annotation, else ownTTL field) wins over the
// policy's TTLs; among the rest, the longest TTL wins (the object is kept as
// long as any matching policy wants it), equal TTLs going to the policy
// whose name sorts first. The caller passes live and dry-run policies
// separately, so a dry-run policy never changes a live decision. It returns
// nil when nothing applies.
func Choose(cands []Candidate) *Verdict {
	var best *Candidate
	for i := range cands {
		c := &cands[i]
		if !c.State.Expirable() || c.ttl() == nil {
			continue
		}
		if best == nil || *c.ttl() > *best.ttl() || (*c.ttl() == *best.ttl() && c.Policy.Name < best.Policy.Name) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	return VerdictFor(best)
}

// VerdictFor is the verdict of one candidate that has a TTL.
func VerdictFor(c *Candidate) *Verdict {
	return &Verdict{
		FinishedAt:  c.State.At,
		TTL:         time.Duration(*c.ttl()) * time.Second,
		Policy:      c.Policy.Name,
		Failed:      c.State.Failed,
		DryRun:      c.Policy.DryRun,
		Events:      c.Policy.Events,
		Propagation: c.Policy.Propagation,
	}
}

// HasTTL reports whether a TTL applies to the candidate's object.
func (c *Candidate) HasTTL() bool { return c.ttl() != nil }

// Member is a finished object of a history-limit group.
type Member struct {
	// Name and UID identify the object.
	Name string
	UID  types.UID
	// Failed is its outcome.
	Failed bool
	// At is when it finished.
	At time.Time
}

// Excess returns the members a history limit removes: per outcome, all but
// the keep newest by finish time, ties going to the name that sorts first
// (nil keep: no limit). The ranking depends only on the members, so a stale
// cache that misses some of them can only make Excess return fewer: an
// object it returns is beyond the limit in every larger view too.
func Excess(members []Member, keepSucceeded, keepFailed *int32) []Member {
	var out []Member
	for _, failed := range []bool{false, true} {
		keep := keepSucceeded
		if failed {
			keep = keepFailed
		}
		if keep == nil {
			continue
		}
		var ms []Member
		for _, m := range members {
			if m.Failed == failed {
				ms = append(ms, m)
			}
		}
		if len(ms) <= int(*keep) {
			continue
		}
		sort.Slice(ms, func(i, j int) bool {
			if !ms[i].At.Equal(ms[j].At) {
				return ms[i].At.After(ms[j].At)
			}
			return ms[i].Name < ms[j].Name
		})
		out = append(out, ms[*keep:]...)
	}
	return out
}
