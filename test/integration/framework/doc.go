// Package framework runs integration tests against a real control plane:
// Main starts one embedded etcd + kube-apiserver + garbage collector per test
// package (through pkg/controlplane, the same code as `jobkeeper up`), each
// test gets its own namespace, and helpers play the kubelet's part by writing
// pod status the way a kubelet would.
//
// Usage:
//
//	func TestMain(m *testing.M) { framework.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		ns := framework.CreateNamespace(t)
//		c := framework.Client(t)
//		...
//		framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
//		framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 2})
//	}
package framework
