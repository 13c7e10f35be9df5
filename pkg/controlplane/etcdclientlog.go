package controlplane

import (
	"io"
	"sync"
	_ "unsafe" // for go:linkname: the apiserver's etcd client logger has no setter

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	// The package whose logger etcdClientLogger names; the apiserver links
	// it in anyway, imported here so that the name resolves in any binary.
	_ "k8s.io/apiserver/pkg/storage/storagebackend/factory"
)

// etcdClientLogger is the logger every etcd client of kube-apiserver's
// storage is given. kube-apiserver builds it when its package is initialised
// with etcd's default configuration, which writes JSON lines to the
// process's stderr, and offers no way to change it: the client's warnings
// (such as a "retrying of unary invoker failed" with "mvcc: required
// revision has been compacted" when a compaction races etcd's own, often at
// a stop) landed on the terminal of `jobkeeper up`. It is replaced, before
// the apiserver makes its clients, by one writing to etcd's log
// (redirectEtcdClientLog). Should a Kubernetes upgrade rename the variable,
// this declaration would become a variable of its own, unused:
// TestEtcdClientLoggerIsTheApiserversOwn fails then.
//
//go:linkname etcdClientLogger k8s.io/apiserver/pkg/storage/storagebackend/factory.etcd3ClientLogger
var etcdClientLogger *zap.Logger

// etcdClientSink is where etcdClientLogger writes: the etcd log of the
// control plane started last. Clients keep the logger they were given, so
// the logger stays and only its destination changes.
var etcdClientSink = &switchWriter{w: io.Discard}

// replaceEtcdClientLogger installs etcdClientLogger once per process.
var replaceEtcdClientLogger sync.Once

// redirectEtcdClientLog sends the apiserver's etcd client log lines, at
// warning level and above as etcd's own, to w as JSON lines. Call it before
// the apiserver starts.
func redirectEtcdClientLog(w io.Writer) {
	etcdClientSink.set(w)
	replaceEtcdClientLogger.Do(func() {
		etcdClientLogger = newEtcdLogger(etcdClientSink, zapcore.WarnLevel).Named("etcd-client")
	})
}

// switchWriter is an io.Writer whose destination can be changed while in
// use.
type switchWriter struct {
	// mu guards w.
	mu sync.Mutex
	// w receives the writes.
	w io.Writer
}

// Write writes p to the current destination.
func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// set makes w the destination of later writes.
func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}
