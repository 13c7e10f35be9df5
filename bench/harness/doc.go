// Package harness holds the pieces that jobkeeper's benchmarks share: the
// classification and counting of API requests (at a client transport or at a
// reverse proxy in front of the apiserver), an instant kubelet that completes
// pods the moment they appear, the start-up of upstream's Job and
// TTL-after-finished controllers the way kube-controller-manager wires them,
// and the statistics (median, percentiles) of the results.
//
// The benchmark command is jobkeeper.dev/jobkeeper/bench (`go run ./bench`);
// see docs/benchmarks.md.
package harness
