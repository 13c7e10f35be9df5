package ttlafterfinished

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// Pacing used by the tests: settle 100ms, interval 1s.
const (
	testSettle   = 100 * time.Millisecond
	testInterval = time.Second
)

func TestStatusPacerDelay(t *testing.T) {
	// step is one event on the timeline: the clock moves by at, then the
	// policy's status sync begins (sync) or a deletion asks for one.
	type step struct {
		at   time.Duration
		sync bool
		// want is the delay a deletion gets.
		want time.Duration
	}
	cases := map[string]struct {
		steps []step
	}{
		"never synced: after the settle delay": {
			steps: []step{{want: testSettle}},
		},
		"long after the last sync: after the settle delay": {
			steps: []step{{sync: true}, {at: 5 * time.Second, want: testSettle}},
		},
		"soon after a sync: at the end of the interval": {
			steps: []step{{sync: true}, {at: 300 * time.Millisecond, want: 700 * time.Millisecond}},
		},
		"near the end of the interval: the settle delay still applies": {
			steps: []step{{sync: true}, {at: 950 * time.Millisecond, want: testSettle}},
		},
		"deletions during an interval all point at its end": {
			steps: []step{
				{sync: true},
				{at: 200 * time.Millisecond, want: 800 * time.Millisecond},
				{at: 200 * time.Millisecond, want: 600 * time.Millisecond},
				{at: 500 * time.Millisecond, want: 100 * time.Millisecond},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clock := testingclock.NewFakePassiveClock(t0)
			p := newStatusPacer(clock)
			for i, s := range tc.steps {
				clock.SetTime(clock.Now().Add(s.at))
				if s.sync {
					p.syncing("pol")
					continue
				}
				if got := p.delay("pol", testSettle, testInterval); got != s.want {
					t.Errorf("step %d: delay %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

func TestStatusPacerForget(t *testing.T) {
	clock := testingclock.NewFakePassiveClock(t0)
	p := newStatusPacer(clock)
	p.syncing("a")
	p.syncing("b")
	p.forget("a")
	if got := p.delay("a", testSettle, testInterval); got != testSettle {
		t.Errorf("forgotten policy: delay %v, want %v", got, testSettle)
	}
	if got := p.delay("b", testSettle, testInterval); got != testInterval {
		t.Errorf("other policy: delay %v, want %v", got, testInterval)
	}
	if len(p.began) != 1 {
		t.Errorf("%d policies remembered, want 1", len(p.began))
	}
}

// TestStatusPacerBurst plays deletions against the pacer and a model of
// the controller's policy queue on a fake clock: one entry per policy, at
// the earliest time asked; a sync begins when its time comes, writes the
// deletions pending, and, when there were some, asks for a check one
// interval later (syncPolicy). It checks the syncs: how many write
// deletions and how many only check, how soon the first comes after the
// first deletion and the last write after the last deletion, and that no
// two are closer than the interval.
func TestStatusPacerBurst(t *testing.T) {
	cases := map[string]struct {
		// deletions are spread evenly over span, one every span/deletions.
		deletions int
		span      time.Duration
		// wantWrites and wantChecks count the syncs with deletions to
		// write and those without.
		wantWrites, wantChecks int
	}{
		"one deletion":                        {deletions: 1, wantWrites: 1, wantChecks: 1},
		"5,000 deletions at once":             {deletions: 5000, wantWrites: 1, wantChecks: 1},
		"5,000 deletions over 10 s":           {deletions: 5000, span: 10 * time.Second, wantWrites: 11, wantChecks: 1},
		"4 deletions 3 s apart: one each":     {deletions: 4, span: 12 * time.Second, wantWrites: 4, wantChecks: 4},
		"10 deletions 0.5 s apart: coalesced": {deletions: 10, span: 5 * time.Second, wantWrites: 6, wantChecks: 1},
	}
	const tick = 10 * time.Millisecond
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clock := testingclock.NewFakePassiveClock(t0)
			p := newStatusPacer(clock)
			ask := func(due, at time.Time) time.Time {
				if due.IsZero() || at.Before(due) {
					return at
				}
				return due
			}
			var due time.Time // the queued sync; zero: none
			pending := 0
			var syncs, writes, deletions []time.Time
			every := tc.span / time.Duration(tc.deletions)
			next := t0
			for now := t0; !now.After(t0.Add(tc.span + 10*testInterval)); now = now.Add(tick) {
				clock.SetTime(now)
				if !due.IsZero() && !due.After(now) {
					syncs, due = append(syncs, now), time.Time{}
					p.syncing("pol")
					if pending > 0 {
						writes, pending = append(writes, now), 0
						due = ask(due, now.Add(testInterval))
					}
				}
				for len(deletions) < tc.deletions && !next.After(now) {
					deletions, pending, next = append(deletions, now), pending+1, next.Add(every)
					due = ask(due, now.Add(p.delay("pol", testSettle, testInterval)))
				}
			}
			if len(writes) != tc.wantWrites || len(syncs)-len(writes) != tc.wantChecks {
				t.Errorf("%d syncs writing deletions and %d checks, want %d and %d; syncs at %v",
					len(writes), len(syncs)-len(writes), tc.wantWrites, tc.wantChecks, syncs)
			}
			if pending > 0 {
				t.Errorf("%d deletions never written", pending)
			}
			if len(writes) == 0 {
				return
			}
			if d := writes[0].Sub(deletions[0]); d > testSettle {
				t.Errorf("first write %v after the first deletion, want at most %v", d, testSettle)
			}
			if d := writes[len(writes)-1].Sub(deletions[len(deletions)-1]); d > testInterval {
				t.Errorf("last write %v after the last deletion, want at most %v", d, testInterval)
			}
			for i := 1; i < len(syncs); i++ {
				if d := syncs[i].Sub(syncs[i-1]); d < testInterval {
					t.Errorf("syncs %d and %d %v apart, want at least %v", i-1, i, d, testInterval)
				}
			}
		})
	}
}

// TestCountDeletionPacesStatusSyncs checks the controller's use of the
// pacer: the delay a deletion asks of the policy queue, the sync that
// writes it, and the check once more an interval later.
func TestCountDeletionPacesStatusSyncs(t *testing.T) {
	pol := builder.MakeTTLPolicy("jobs").TTLAfterSuccess(1).Obj()
	u := unstructuredPolicy(t, pol)
	f := newFixture(t, t0, nil, []runtime.Object{u})
	if err := f.c.policyInformer.GetStore().Add(u); err != nil {
		t.Fatal(err)
	}
	after := func() time.Duration {
		f.policyQ.mu.Lock()
		defer f.policyQ.mu.Unlock()
		return f.policyQ.after[pol.Name]
	}

	f.c.countDeletion(pol.Name, t0, false)
	if got := after(); got != StatusSettleDelay {
		t.Errorf("first deletion: status sync asked after %v, want %v", got, StatusSettleDelay)
	}
	f.clock.Step(StatusSettleDelay)
	if err := f.c.syncPolicy(f.ctx, pol.Name); err != nil {
		t.Fatal(err)
	}
	if got := after(); got != StatusWriteInterval {
		t.Errorf("after writing a deletion: next check after %v, want %v", got, StatusWriteInterval)
	}
	if f.c.hasStats(pol.Name) {
		t.Error("the deletion is still pending after the sync")
	}

	f.clock.Step(300 * time.Millisecond)
	f.c.countDeletion(pol.Name, f.clock.Now(), false)
	if got, want := after(), StatusWriteInterval-300*time.Millisecond; got != want {
		t.Errorf("deletion 300ms after a sync: status sync asked after %v, want %v", got, want)
	}
	f.c.noteError(pol.Name, errors.New("deleting: forbidden"))
	if got, want := after(), StatusWriteInterval-300*time.Millisecond; got != want {
		t.Errorf("error 300ms after a sync: status sync asked after %v, want %v", got, want)
	}

	// A sync with nothing pending does not ask for another check.
	f.clock.Step(StatusWriteInterval)
	if err := f.c.syncPolicy(f.ctx, pol.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncPolicy(f.ctx, pol.Name); err != nil {
		t.Fatal(err)
	}
	if got := after(); got != PolicyResyncPeriod {
		t.Errorf("sync with nothing pending: next sync after %v, want %v", got, PolicyResyncPeriod)
	}
	if diff := cmp.Diff(map[string]time.Time{pol.Name: f.clock.Now()}, f.c.pacer.began); diff != "" {
		t.Errorf("syncs remembered (-want +got):\n%s", diff)
	}
}
