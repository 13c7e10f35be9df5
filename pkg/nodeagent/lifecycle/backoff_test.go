package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRestartBackoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		// runFor is how long each attempt runs before failing.
		runFor []time.Duration
		// want is the wait before each restart.
		want []time.Duration
	}{
		"crash loop doubles up to the max": {
			runFor: []time.Duration{0, 0, 0, 0, 0, 0, 0, 0},
			want:   []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second},
		},
		"a long run resets the back-off": {
			runFor: []time.Duration{0, 0, 0, 11 * time.Minute, 0},
			want:   []time.Duration{0, 10 * time.Second, 20 * time.Second, 0, 10 * time.Second},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b RestartBackoff
			now := t0
			var got []time.Duration
			for _, d := range tc.runFor {
				now = now.Add(d)
				wait := b.next(now)
				got = append(got, wait)
				now = now.Add(wait)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
		})
	}
}
