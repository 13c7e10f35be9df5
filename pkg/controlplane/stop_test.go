package controlplane

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// TestStopConcurrent: Stop called from several goroutines at once (up's
// shutdown goroutine and its deferred Stop, after the shutdown limit ran
// out) stops etcd once and releases the lock; it used to close etcd twice
// and panic with "close of closed channel".
func TestStopConcurrent(t *testing.T) {
	dir := t.TempDir()
	lock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	socket, cleanup, err := etcdSocket(filepath.Join(dir, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	e, _, err := startEtcd(context.Background(), filepath.Join(dir, "etcd"), socket, filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{lock: lock, etcd: e}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(cp.Stop)
	}
	wg.Wait()
	cp.Stop()
	select {
	case <-e.Server.StopNotify():
	default:
		t.Error("etcd is still running after Stop")
	}
	relock, err := lockDir(dir)
	if err != nil {
		t.Fatalf("the data directory is still locked after Stop: %v", err)
	}
	relock.release()
}

// TestTrackingListener: the listener forgets connections closed by their
// server, and closeAll ends the open ones, which their clients see.
func TestTrackingListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := trackConnections(l)
	defer tl.Close()
	dial := func() (client, server net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := tl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	c1, s1 := dial()
	defer c1.Close()
	c2, _ := dial()
	defer c2.Close()
	if n := tl.open(); n != 2 {
		t.Fatalf("open() = %d after two accepts, want 2", n)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	if n := tl.open(); n != 1 {
		t.Fatalf("open() = %d after the server closed one, want 1", n)
	}
	if n := tl.closeAll(); n != 1 {
		t.Errorf("closeAll() = %d, want 1", n)
	}
	if n := tl.open(); n != 0 {
		t.Errorf("open() = %d after closeAll, want 0", n)
	}
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the client of a closed connection reads %v, want EOF", err)
	}
}
