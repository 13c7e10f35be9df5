// Package fault is a fault-injecting reverse proxy in front of a Kubernetes
// apiserver, for tests that check a controller stays exact under adversity:
// watch events that arrive late, watch streams that break, writes that fail
// before or after the apiserver applied them, throttling, unavailability and
// writes that hang and land after their client gave up.
//
// A test starts the proxy in front of its apiserver and points the
// controller under test at it:
//
//	p, err := fault.New(apiserverConfig, 1)
//	...
//	defer p.Close()
//	p.Set(fault.Faults{WatchDelay: 200 * time.Millisecond, FailAfter: 0.1})
//	client := kubernetes.NewForConfigOrDie(p.ClientConfig())
//
// or, for a controller in a child process, hands it the kubeconfig from
// WriteKubeconfig. The proxy listens on 127.0.0.1 with TLS (a self-signed
// certificate that ClientConfig and WriteKubeconfig trust) so that clients
// speak HTTP/2 to it, one multiplexed connection as with a real apiserver.
// It forwards with the credentials of the configuration it was built from,
// so its clients need none.
//
// The faults can be changed at any time with Set. Errors are answered the
// way the apiserver answers them, with a JSON metav1.Status body, so
// client-go turns them into the matching apierrors (IsInternalError,
// IsTooManyRequests, IsServiceUnavailable). Every injected fault is counted
// by name (see Injected); the random choices come from a seeded generator,
// so that a sequential run injects the same faults every time.
//
// A write chosen to hang is held for Faults.HangFor and then forwarded
// whether or not its client is still waiting: if the client gave up in the
// meantime, the apiserver still applies the write and its response is
// discarded. This is the nastiest case for a controller, a write that it
// believes failed, or at least never saw succeed, lands later.
package fault
