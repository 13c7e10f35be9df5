// Package ttlafterfinished benchmarks jobkeeper's TTL-after-finished
// controller against upstream's k8s.io/kubernetes/pkg/controller/ttlafterfinished
// on one in-process control plane: each cleans N Jobs that are already
// expired (TTL 0, finished), at the same client QPS and burst, with requests
// counted at the client transport (jobkeeper.dev/jobkeeper/bench/harness).
// It is the quick in-process variant of the `ttl` workload of
// `go run ./bench`, which also measures CPU and memory (docs/benchmarks.md).
//
//	go test ./test/bench/ttlafterfinished/ -run '^$' -bench . -benchtime 1x -timeout 30m
//
// JOBKEEPER_BENCH_JOBS sets N (default 5000); JOBKEEPER_BENCH_NO_EVENTS=1
// drops jobkeeper's events, to measure their cost; JOBKEEPER_BENCH_WORKERS sets
// both controllers' workers (default 5).
package ttlafterfinished
