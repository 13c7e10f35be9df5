// Package controlplane runs a real, embedded Kubernetes control plane in the
// current process: a single-member etcd, kube-apiserver from k8s.io/kubernetes
// and the upstream garbage collector. It generates (on first start) and reuses
// (afterwards) the certificates it needs under its data directory, writes an
// admin kubeconfig with a client certificate, and holds an exclusive lock on
// the data directory while it runs.
//
// Both `jobkeeper up` and the integration test framework start the control
// plane through Start, so the tests exercise the same start-up code as users.
package controlplane
