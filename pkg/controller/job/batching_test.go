package job

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestBatchDelay(t *testing.T) {
	const period = time.Second
	const few = 3
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	cases := map[string]struct {
		// events are the times of the wake-ups, from t0.
		events []time.Duration
		period time.Duration
		// want are the delays decided for each.
		want []time.Duration
		// wantWindow is the state after the last one.
		wantWindow eventWindow
	}{
		"the first wake-up syncs at once": {
			events:     []time.Duration{0},
			want:       []time.Duration{0},
			wantWindow: eventWindow{start: at(0), events: 1},
		},
		"few wake-ups in a period sync at once": {
			events:     []time.Duration{0, 100 * time.Millisecond, 900 * time.Millisecond},
			want:       []time.Duration{0, 0, 0},
			wantWindow: eventWindow{start: at(0), events: 3},
		},
		"a burst is batched for the whole period once the wake-ups are no longer few": {
			events:     []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond},
			want:       []time.Duration{0, 0, 0, period, period},
			wantWindow: eventWindow{start: at(0), events: 5},
		},
		"the period after a burst is batched from its first wake-up": {
			events:     []time.Duration{0, 1, 2, 3, 1500 * time.Millisecond, 1600 * time.Millisecond},
			want:       []time.Duration{0, 0, 0, period, period, period},
			wantWindow: eventWindow{start: at(1500 * time.Millisecond), events: 2, busy: true},
		},
		"a quiet period after a burst ends the batching": {
			events:     []time.Duration{0, 1, 2, 3, 1500 * time.Millisecond, 2600 * time.Millisecond},
			want:       []time.Duration{0, 0, 0, period, period, 0},
			wantWindow: eventWindow{start: at(2600 * time.Millisecond), events: 1},
		},
		"a burst long ago does not count": {
			events:     []time.Duration{0, 1, 2, 3, 5 * time.Second},
			want:       []time.Duration{0, 0, 0, period, 0},
			wantWindow: eventWindow{start: at(5 * time.Second), events: 1},
		},
		"a steady trickle of few wake-ups per period syncs at once": {
			events:     []time.Duration{0, 400 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond, 1600 * time.Millisecond, 2000 * time.Millisecond, 2400 * time.Millisecond},
			want:       []time.Duration{0, 0, 0, 0, 0, 0, 0},
			wantWindow: eventWindow{start: at(2400 * time.Millisecond), events: 1},
		},
		"no batch period: always at once": {
			events:     []time.Duration{0, 1, 2, 3, 4},
			period:     -1,
			want:       []time.Duration{0, 0, 0, 0, 0},
			wantWindow: eventWindow{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := period
			if tc.period != 0 {
				p = max(tc.period, 0)
			}
			var w eventWindow
			var got []time.Duration
			for _, e := range tc.events {
				var d time.Duration
				w, d = batchDelay(w, at(e), p, few)
				got = append(got, d)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delays (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWindow, w, cmp.AllowUnexported(eventWindow{})); diff != "" {
				t.Errorf("window (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodEventsAdaptiveBatching checks that a Job with few pod events is
// synced at once and one with a burst of them after the batch period.
func TestPodEventsAdaptiveBatching(t *testing.T) {
	quiet := builder.MakeJob("quiet", ns).Selector("quiet-uid").ManagedBy(DefaultManagedBy).Obj()
	busy := builder.MakeJob("busy", ns).Selector("busy-uid").ManagedBy(DefaultManagedBy).Obj()
	h := newHarness(t, Options{}, quiet)
	if err := h.factory.Batch().V1().Jobs().Informer().GetIndexer().Add(busy); err != nil {
		t.Fatal(err)
	}
	h.c.opts.SyncBatchPeriod = time.Second
	queued(h.c)
	logger := klog.Background()

	h.c.addPod(logger, builder.MakePod("quiet-0", ns).OwnedByJob(quiet).Obj())
	if jobs, _ := queued(h.c); !cmp.Equal(jobs, []string{"ns/quiet"}) {
		t.Errorf("after one pod event, queued at once: %v, want the quiet Job", jobs)
	}

	for i := range fewPodEvents + 5 {
		h.c.addPod(logger, builder.MakePod(fmt.Sprintf("busy-%d", i), ns).OwnedByJob(busy).Obj())
		queued(h.c)
	}
	h.c.addPod(logger, builder.MakePod("busy-last", ns).OwnedByJob(busy).Obj())
	if jobs, _ := queued(h.c); len(jobs) != 0 {
		t.Errorf("during a burst, queued at once: %v, want nothing before the batch period", jobs)
	}
	h.clock.Step(time.Second)
	// The delaying queue adds the key from its own goroutine.
	for deadline := time.Now().Add(10 * time.Second); h.c.queue.Len() == 0 && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if jobs, _ := queued(h.c); !cmp.Equal(jobs, []string{"ns/busy"}) {
		t.Errorf("after the batch period, queued: %v, want the busy Job", jobs)
	}

	h.c.forgetJob("ns/busy", busy.UID)
	h.c.addPod(logger, builder.MakePod("busy-again", ns).OwnedByJob(busy).Obj())
	if jobs, _ := queued(h.c); !cmp.Equal(jobs, []string{"ns/busy"}) {
		t.Errorf("after forgetJob, queued at once: %v, want the busy Job", jobs)
	}
}
