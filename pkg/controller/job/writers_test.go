package job

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestForEachPod(t *testing.T) {
	for _, n := range []int{0, 1, maxWritersPerSync, 500} {
		var mu sync.Mutex
		seen := map[int]int{}
		var running, peak atomic.Int32
		release := make(chan struct{})
		go func() {
			// Let the first writers block until all that may run have
			// started, so the peak shows the bound.
			for running.Load() < int32(min(n, maxWritersPerSync)) {
				runtime.Gosched()
			}
			close(release)
		}()
		forEachPod(n, func(i int) {
			r := running.Add(1)
			for {
				p := peak.Load()
				if r <= p || peak.CompareAndSwap(p, r) {
					break
				}
			}
			<-release
			mu.Lock()
			seen[i]++
			mu.Unlock()
			running.Add(-1)
		})
		if len(seen) != n {
			t.Errorf("n=%d: %d indexes written, want %d", n, len(seen), n)
		}
		for i, c := range seen {
			if c != 1 || i < 0 || i >= n {
				t.Errorf("n=%d: index %d written %d times", n, i, c)
			}
		}
		if want := int32(min(n, maxWritersPerSync)); peak.Load() != want {
			t.Errorf("n=%d: %d writers at once, want %d", n, peak.Load(), want)
		}
	}
}
