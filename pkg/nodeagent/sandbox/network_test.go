package sandbox

import (
	"context"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNetworkNamespace returns a new network namespace holding a veth pair
// probe0/probe1 (nothing of the host's touched), open until the
// test's end.
func newNetworkNamespace(t *testing.T) *os.File {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	c := make(chan result, 1)
	go func() {
		// Not unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c <- result{err: err}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		c <- result{f, err}
	}()
	r := <-c
	if r.err != nil {
		t.Skipf("cannot create a network namespace: %v", r.err)
	}
	t.Cleanup(func() { _ = r.f.Close() })
	h, err := netlink.NewHandleAt(netns.NsHandle(r.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, PeerName: "probe1"}); err != nil {
		t.Fatal(err)
	}
	return r.f
}

// interfaces returns the interface names of /proc/net/dev's text.
func interfaces(dev string) []string {
	var out []string
	for _, line := range strings.Split(dev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}

func TestNetworkNamespaces(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a pod's network namespace needs the agent to run as root")
	}
	t.Run("new", func(t *testing.T) {
		s, out := startTestWith(t, true, StartOptions{Network: NetworkNew}, Config{Command: []string{"cat", "/proc/net/dev"}})
		<-s.Done()
		if got := interfaces(out()); strings.Join(got, ",") != "lo" {
			t.Errorf("interfaces in a new network namespace: %v, want lo alone", got)
		}
	})
	t.Run("join", func(t *testing.T) {
		ns := newNetworkNamespace(t)
		// probe0 exists only in ns.
		s, out := startTestWith(t, true, StartOptions{Network: NetworkJoin, JoinNetworkNamespace: ns},
			Config{PIDNamespace: PIDContainer, Command: []string{"sh", "-c", "cat /proc/net/dev; exec sleep 60"}})
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		devNull, _ := os.Open(os.DevNull)
		defer devNull.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The exec'd command waits for the container's sleep, so the
		// container's own listing is written before the kill below.
		wait := "until grep -qx sleep /proc/[0-9]*/comm 2>/dev/null; do sleep 0.01; done; cat /proc/net/dev"
		p, err := s.Exec(ctx, []string{"sh", "-c", wait}, false, devNull, w, w)
		_ = w.Close()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		_, _ = p.Wait(ctx)
		want := "lo,probe1,probe0"
		if got := interfaces(string(b)); strings.Join(got, ",") != want {
			t.Errorf("an exec'd command sees %v, want the joined namespace's %s", got, want)
		}
		s.Kill()
		<-s.Done()
		if got := interfaces(out()); strings.Join(got, ",") != want {
			t.Errorf("the container sees %v, want the joined namespace's %s", got, want)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, o := range []StartOptions{{Network: NetworkJoin}, {Network: "bridge"}, {JoinNetworkNamespace: os.Stdin}} {
			if _, _, err := startSandbox(t, true, o, Config{Command: []string{"true"}}); err == nil {
				t.Errorf("Start with %+v succeeded", o)
			}
		}
	})
}

// TestNetworkNamespacesNeedRoot: an agent that is not root is refused a
// network namespace, with the reason.
func TestNetworkNamespacesNeedRoot(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("run as a user other than root")
	}
	_, _, err := startSandbox(t, true, StartOptions{Network: NetworkNew}, Config{Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "needs the agent to run as root") {
		t.Errorf("Start with a new network namespace as a user: %v", err)
	}
}
