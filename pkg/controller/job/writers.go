package job

import (
	"sync"
	"sync/atomic"
)

// maxWritersPerSync bounds the goroutines one sync uses for its pod writes
// (creates, finalizer removals, deletions). Upstream starts one goroutine
// per pod, up to 500 per sync, each growing a fresh stack through the
// HTTP/2 client; 64 long-running writers keep the rate limiter, not the
// goroutine count, the bound on a healthy apiserver (64 writers at 20 ms per
// request are 3,200 requests per second).
const maxWritersPerSync = 64

// forEachPod calls write(i) for every i in [0, n) from at most
// maxWritersPerSync goroutines, and returns when every call has returned.
func forEachPod(n int, write func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxWritersPerSync) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				write(i)
			}
		})
	}
	wg.Wait()
}
