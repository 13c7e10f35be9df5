package main

import (
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalRelay: the first stop is passed on, a second within a second
// is taken as the same stop (systemd signals every process of a unit),
// a later one is passed on (a second Ctrl-C), SIGHUP is passed on as
// SIGTERM, and other signals always pass.
func TestSignalRelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r signalRelay
	steps := []struct {
		sig     os.Signal
		at      time.Duration
		want    os.Signal
		wantFwd bool
	}{
		{syscall.SIGUSR1, 0, syscall.SIGUSR1, true},
		{syscall.SIGTERM, 0, syscall.SIGTERM, true},
		{syscall.SIGTERM, 300 * time.Millisecond, nil, false},
		{syscall.SIGINT, 900 * time.Millisecond, nil, false},
		{syscall.SIGINT, 1100 * time.Millisecond, syscall.SIGINT, true},
		{syscall.SIGHUP, 3 * time.Second, syscall.SIGTERM, true},
		{syscall.SIGHUP, 3*time.Second + time.Millisecond, nil, false},
	}
	for i, s := range steps {
		got, fwd := r.relay(s.sig, t0.Add(s.at))
		if fwd != s.wantFwd || (fwd && got != s.want) {
			t.Errorf("step %d: relay(%v) = %v, %v; want %v, %v", i, s.sig, got, fwd, s.want, s.wantFwd)
		}
	}
	if !r.stopping {
		t.Error("not stopping after a SIGTERM was passed on")
	}
}

// TestRootlessNodeArgs: the pinned flags go after the user's flags (pflag
// keeps the last value) and before a "--".
func TestRootlessNodeArgs(t *testing.T) {
	flags := []string{"--port=6443"}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"jobkeeper", "up", "--port", "0"}, []string{"jobkeeper", "up", "--port", "0", "--port=6443"}},
		{[]string{"jobkeeper", "up", "--", "x"}, []string{"jobkeeper", "up", "--port=6443", "--", "x"}},
	} {
		got := rootlessNodeArgs(tc.args, flags)
		if !slices.Equal(got, tc.want) {
			t.Errorf("rootlessNodeArgs(%q) = %q, want %q", tc.args, got, tc.want)
		}
		if !slices.Equal(tc.args[:2], []string{"jobkeeper", "up"}) {
			t.Errorf("the arguments were changed: %q", tc.args)
		}
	}
}

// TestRootlessResolvers: resolvers on this host's loopback are reached
// through pasta's DNS forward (once: it forwards to one), others as they
// are.
func TestRootlessResolvers(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"10.255.255.53:53"}, []string{"10.255.255.53:53"}},
		{[]string{"127.0.0.53:53"}, []string{"169.254.1.53:53"}},
		{[]string{"127.0.0.1:53", "[::1]:53", "192.0.2.1:53"}, []string{"169.254.1.53:53", "192.0.2.1:53"}},
		{nil, nil},
	} {
		if got := rootlessResolvers(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("rootlessResolvers(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestHostPortFor: a port asked for is kept; port 0 takes the last one
// when free, else a free one.
func TestHostPortFor(t *testing.T) {
	if p, err := hostPortFor("127.0.0.1", 7000, 0); err != nil || p != 7000 {
		t.Errorf("hostPortFor(7000) = %d, %v", p, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := l.Addr().(*net.TCPAddr).Port
	p, err := hostPortFor("127.0.0.1", 0, taken)
	if err != nil || p == taken || p == 0 {
		t.Errorf("with the last port %d taken: %d, %v", taken, p, err)
	}
	_ = l.Close()
	if p, err := hostPortFor("127.0.0.1", 0, taken); err != nil || p != taken {
		t.Errorf("with the last port %d free: %d, %v", taken, p, err)
	}
}

// TestRootlessPublished: the apiserver's port and the metrics port are
// pinned for the node's up and published by pasta on their addresses; a
// metrics host that is not an address is refused, naming the flag.
func TestRootlessPublished(t *testing.T) {
	up := &upOptions{port: 6555, dataDir: t.TempDir()}
	flags, pasta, err := rootlessPublished(up, "127.0.0.1:7555")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(flags, []string{"--port=6555", "--metrics-bind-address=127.0.0.1:7555"}) ||
		!slices.Equal(pasta, []string{"-t", "127.0.0.1/6555", "-t", "127.0.0.1/7555"}) {
		t.Errorf("flags %q, pasta %q", flags, pasta)
	}
	flags, pasta, err = rootlessPublished(up, "0")
	if err != nil || len(flags) != 1 || len(pasta) != 2 {
		t.Errorf("metrics off: %q %q %v", flags, pasta, err)
	}
	if _, _, err := rootlessPublished(up, "localhost:0"); err == nil || !strings.Contains(err.Error(), "--metrics-bind-address") {
		t.Errorf("a host name: %v", err)
	}
	_, pasta, err = rootlessPublished(up, ":0")
	if err != nil || len(pasta) != 4 {
		t.Fatalf("any address: %q %v", pasta, err)
	}
	if _, err := strconv.Atoi(pasta[3]); err != nil {
		t.Errorf("a port on every address is published as %q, want a bare port", pasta[3])
	}
}
