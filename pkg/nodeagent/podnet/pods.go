package podnet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Pods gives each pod a network namespace of its own, wired by a Node. A
// namespace is pinned by a bind mount of it on a file named by the pod's
// UID in a directory (as containerd pins the namespaces it hands to CNI),
// so it lives while the mount does: with no process in it yet, between two
// containers, and across agent restarts. Containers join it by that file.
type Pods struct {
	node *Node
	dir  string
	// mu serialises creating and removing namespaces, and guards the
	// host ports.
	mu sync.Mutex
	// hostPorts are the pods' host ports (hostports.go); portsWritten is
	// set once the table was written.
	hostPorts    map[string][]PortMapping
	portsWritten bool
}

// NewPods returns the pods' namespaces pinned in dir (created when
// missing), wired by node.
func NewPods(node *Node, dir string) (*Pods, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the directory of pods' network namespaces: %w", err)
	}
	return &Pods{node: node, dir: dir}, nil
}

// Node is the node's side the namespaces are wired to.
func (p *Pods) Node() *Node { return p.node }

// path is pod uid's namespace file.
func (p *Pods) path(uid string) (string, error) {
	if uid == "" || uid == "." || uid == ".." || strings.ContainsAny(uid, "/\x00") {
		return "", fmt.Errorf("pod UID %q", uid)
	}
	return filepath.Join(p.dir, uid), nil
}

// Ensure returns the file of pod uid's network namespace and the pod's
// address: its namespace and address when it has both and they are wired,
// else a namespace created (or the pinned one) and attached now. A failure
// leaves no namespace the call created.
func (p *Pods) Ensure(uid string) (string, netip.Addr, error) {
	path, err := p.path(uid)
	if err != nil {
		return "", netip.Addr{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	created := false
	if !isPinned(path) {
		if err := pin(path); err != nil {
			return "", netip.Addr{}, fmt.Errorf("creating the pod's network namespace: %w", err)
		}
		created = true
	}
	if ip, ok := p.node.Address(uid); ok && !created && p.node.attached(uid) {
		return path, ip, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		if created {
			_ = unpin(path)
		}
		return "", netip.Addr{}, fmt.Errorf("opening the pod's network namespace: %w", err)
	}
	defer ns.Close()
	ip, err := p.node.Attach(uid, ns)
	if err != nil {
		if created {
			_ = unpin(path)
		}
		return "", netip.Addr{}, err
	}
	return path, ip, nil
}

// Lookup returns the file of pod uid's namespace and its address, if it
// has both.
func (p *Pods) Lookup(uid string) (string, netip.Addr, bool) {
	path, err := p.path(uid)
	if err != nil || !isPinned(path) {
		return "", netip.Addr{}, false
	}
	ip, ok := p.node.Address(uid)
	return path, ip, ok
}

// Remove removes pod uid's namespace and veth and frees its address.
// Processes still in the namespace keep it until they end, unreachable.
func (p *Pods) Remove(uid string) error {
	path, err := p.path(uid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.unmapPorts(uid), unpin(path), p.node.Detach(uid))
}

// Prune removes the namespaces and addresses of the pods for which live
// is false (at an agent's start: pods gone, or finished, while it was
// away).
func (p *Pods) Prune(live func(uid string) bool) error {
	entries, err := os.ReadDir(p.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !live(e.Name()) {
			errs = append(errs, p.Remove(e.Name()))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	errs = append(errs, p.node.Release(live))
	return errors.Join(errs...)
}

// TearDown removes every pod's namespace, then the node's side
// (Node.TearDown).
func (p *Pods) TearDown() error {
	errs := []error{UnpinAll(p.dir)}
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(append(errs, p.node.TearDown())...)
}

// UnpinAll removes every namespace pinned in dir, and dir (jobkeeper reset,
// after a crash left them).
func UnpinAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, unpin(filepath.Join(dir, e.Name())))
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DialContext connects to addr from inside pod uid's namespace (as CRI
// runtimes forward a port: a server that listens on the pod's loopback
// is reached too).
func (p *Pods) DialContext(ctx context.Context, uid, network, addr string) (net.Conn, error) {
	path, err := p.path(uid)
	if err != nil {
		return nil, err
	}
	if !isPinned(path) {
		return nil, fmt.Errorf("the pod has no network namespace")
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening the pod's network namespace: %w", err)
	}
	defer ns.Close()
	var conn net.Conn
	err = InNamespace(ns, func() error {
		// A socket belongs to the namespace it was created in, whichever
		// thread later uses it: only the socket's creation needs this
		// thread, and a dial's first step creates it.
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// isPinned reports whether path is a pinned namespace (a mount of nsfs).
func isPinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// pin creates a network namespace and pins it at path, a new file.
func pin(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	_ = f.Close()
	errc := make(chan error, 1)
	go func() {
		// A thread whose namespace could not be restored is never
		// unlocked, so it ends with the goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unprivilegedPorts()
		if err == nil {
			self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
			if err = unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
				err = fmt.Errorf("pinning it at %s: %w", path, err)
			}
		}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// podSysctls are the sysctls a pod's network namespace starts with, as
// containerd 2's CRI sets them by default (enable_unprivileged_ports and
// enable_unprivileged_icmp): any port may be bound and any group may send
// ICMP echo without a capability, as the pod has the namespace to itself.
// Without it a container's root, which has its capabilities in its own
// user namespace but not in the one that owns the pod's network namespace
// (the node's, as a user), could not listen on port 80.
var podSysctls = []struct{ path, value string }{
	{"/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"},
	{"/proc/sys/net/ipv4/ping_group_range", pingGroups()},
}

// pingGroups is the widest ping_group_range the kernel takes here: every
// group, or in a user namespace (the rootless node's) from the lowest
// group it maps to the highest, since a range may only name mapped
// groups there (/proc/self/gid_map).
func pingGroups() string {
	b, _ := os.ReadFile("/proc/self/gid_map")
	return pingGroupsOf(string(b))
}

// pingGroupsOf is pingGroups for the gid_map gidMap.
func pingGroupsOf(gidMap string) string {
	const all, top = "0 2147483647", 2147483647
	low, high := uint64(top), uint64(0)
	for _, line := range strings.Split(gidMap, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		start, err1 := strconv.ParseUint(f[0], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 || start > top {
			continue
		}
		low, high = min(low, start), max(high, min(start+count-1, top))
	}
	if low > high || (low == 0 && high == top) {
		return all
	}
	return fmt.Sprintf("%d %d", low, high)
}

// unprivilegedPorts writes podSysctls in the calling thread's network
// namespace (/proc/sys/net is the opening thread's namespace's); a kernel
// without one of them (before Linux 4.11) keeps its default.
func unprivilegedPorts() error {
	for _, s := range podSysctls {
		if err := os.WriteFile(s.path, []byte(s.value+"\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("setting %s to %s in the pod's network namespace: %w", strings.TrimPrefix(s.path, "/proc/sys/"), s.value, err)
		}
	}
	return nil
}

// unpin unmounts the namespace pinned at path and removes the file.
func unpin(path string) error {
	for isPinned(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unpinning %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
