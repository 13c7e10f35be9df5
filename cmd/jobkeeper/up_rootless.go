package main

// The rootless node. As root, --network=pod makes the node's bridge, the
// pods' network namespaces and the Services' nftables rules in this host's
// network namespace. A user cannot; so, as rootless k3s and usernetes do
// with RootlessKit, up runs again inside a user and network namespace of
// its own (the node's), where it holds the network capabilities, and
// pasta, from the passt project, connects that namespace to this host in
// user mode:
//   - egress: the namespace's default route is pasta's tap device, whose
//     traffic pasta replays with ordinary sockets of this host's;
//   - published ports: pasta listens on this host's 127.0.0.1 at the
//     apiserver's port (and the metrics port) and connects each
//     connection to the same port inside;
//   - this host's loopback: ports bound on this host's 127.0.0.1 are bound
//     on the namespace's loopback too (pasta's -T/-U auto), so up reaches
//     a registry on localhost, as it would as root.
//
// Inside, up keeps the user's uid (mapped to itself) with the capabilities
// of the network alone, in its own thread set: a constructor
// (up_rootless_cgo.go) clears the ambient set before the Go runtime
// starts, so that nothing up starts inherits them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/clusterdns"
	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// rootlessNodeEnv marks the up that runs inside the rootless node's
// namespaces; it is removed from the environment as that up starts.
const rootlessNodeEnv = "_JOBKEEPER_ROOTLESS_NODE"

// inRootlessNode says that this process is the up inside the rootless
// node's namespaces (read once, before anything changes the environment).
var inRootlessNode = os.Getenv(rootlessNodeEnv) == "1" || os.Getenv(rootlessNodeEnv) == rootlessNodeMappedLater

// rootlessNodeMappedLater is rootlessNodeEnv's value for an up whose user
// namespace the parent maps after it started (with subordinate ids): its
// constructor waits for the mapping (up_rootless_cgo.go).
const rootlessNodeMappedLater = "2"

// rootlessNodeCaps are the capabilities up holds in the node's user
// namespace: the network's (links, routes, nftables, sysctls), entering
// pods' network namespaces and pinning them (CAP_SYS_ADMIN, in that
// namespace only), and the DNS's and the relay's ports below 1024.
// With the user's subordinate ids mapped into the namespace, also
// CAP_SETUID and CAP_SETGID, to map them into sandboxes (sandbox.SubIDs).
var rootlessNodeCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID}

// rootlessNetworkWait is how long the node's up waits for pasta to give
// its namespace a route out.
const rootlessNetworkWait = 20 * time.Second

// canNetworkPods says whether this process can build the pod network:
// root, or the up inside the rootless node.
func canNetworkPods() bool { return os.Geteuid() == 0 || inRootlessNode }

// pastaInstallHint says how to get pasta.
const pastaInstallHint = "install pasta (the passt package: apt install passt, dnf install passt)"

// rootlessPrerequisites finds what the rootless node needs and returns
// pasta's path, or one line saying what is missing and what to do instead.
func rootlessPrerequisites() (string, error) {
	const instead = "; or start with --network=host to share this host's network"
	if !rootlessNodeSupported {
		return "", errors.New("--network=pod as a user needs a jobkeeper built with cgo" + instead)
	}
	pasta, err := exec.LookPath("pasta")
	if err != nil {
		return "", errors.New("--network=pod as a user connects the node's network namespace to this host with pasta, which is not installed: " + pastaInstallHint + instead)
	}
	if err := unix.Access("/dev/net/tun", unix.R_OK|unix.W_OK); err != nil {
		return "", fmt.Errorf("--network=pod as a user needs /dev/net/tun to be readable and writable by you (%v); most distributions make it so (mode 0666)%s", err, instead)
	}
	return pasta, nil
}

// hostPortFor is the port to publish on this host for a wanted port: it
// when set; else last when it is free on address; else a free one.
func hostPortFor(address string, wanted, last int) (int, error) {
	if wanted != 0 {
		return wanted, nil
	}
	if last != 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(last))); err == nil {
			_ = l.Close()
			return last, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", address, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rootlessPublished resolves the ports up serves to this host (the
// apiserver's, and the metrics endpoint's unless disabled) and returns
// the flags that pin them for the up inside and pasta's -t options.
func rootlessPublished(up *upOptions, metricsAddr string) (flags, pastaArgs []string, err error) {
	if err := controlplane.CheckPort(up.port); err != nil {
		return nil, nil, err
	}
	port, err := hostPortFor("127.0.0.1", up.port, controlplane.LastPort(up.dataDir))
	if err != nil {
		return nil, nil, err
	}
	flags = append(flags, "--port="+strconv.Itoa(port))
	pastaArgs = append(pastaArgs, "-t", "127.0.0.1/"+strconv.Itoa(port))
	if metricsAddr != "" && metricsAddr != "0" {
		host, p, err := net.SplitHostPort(metricsAddr)
		if err != nil {
			return nil, nil, fmt.Errorf("--metrics-bind-address %q: %w", metricsAddr, err)
		}
		mp, err := strconv.Atoi(p)
		if err != nil {
			return nil, nil, fmt.Errorf("--metrics-bind-address %q: the port: %w", metricsAddr, err)
		}
		if host == "" {
			host = "0.0.0.0"
		}
		if net.ParseIP(host) == nil {
			return nil, nil, fmt.Errorf("--metrics-bind-address %q: with --network=pod as a user the host must be an IP address (pasta publishes the port on it)", metricsAddr)
		}
		if mp, err = hostPortFor(host, mp, 0); err != nil {
			return nil, nil, err
		}
		flags = append(flags, "--metrics-bind-address="+net.JoinHostPort(host, strconv.Itoa(mp)))
		spec := strconv.Itoa(mp)
		if ip := net.ParseIP(host); !ip.IsUnspecified() {
			spec = host + "/" + spec
		}
		pastaArgs = append(pastaArgs, "-t", spec)
	}
	return flags, pastaArgs, nil
}

// pastaArgs are pasta's options for the node's namespace, whose holder is
// pid: its tap configured as this host's interface with the default route
// (--config-net); connections to the gateway's address not turned into
// this host's loopback (--no-map-gw: pods reach this host's loopback no
// more than as root); no UDP port published; this host's loopback ports
// bound on the namespace's loopback (-T/-U auto); DNS queries to
// rootlessDNSForward sent to this host's resolver.
func pastaArgs(published []string, pid int) []string {
	args := []string{"--config-net", "--no-map-gw", "--quiet", "--foreground", "-u", "none", "-T", "auto", "-U", "auto", "--dns-forward", rootlessDNSForward.String()}
	args = append(args, published...)
	return append(args, strconv.Itoa(pid))
}

// runRootlessNode runs this up again, as the same user, inside a user,
// network and mount namespace of its own connected to this host by pasta,
// and returns as it ends (with its exit code). Signals to this process
// are passed on to it (signalRelay); when this process dies it stops as
// on SIGTERM (watchPasta). pasta ends with it: ended by this process, or
// by the node's up if this process is gone.
func runRootlessNode(up *upOptions, metricsAddr string, cidr netip.Prefix) error {
	pasta, err := rootlessPrerequisites()
	if err != nil {
		return err
	}
	// What runUp would refuse first, refused before a port is taken: a
	// data directory in use, then a pod CIDR overlapping this host's
	// routes (the node's namespace sees none of them).
	if err := controlplane.CheckDirLock(up.dataDir); err != nil {
		return err
	}
	if err := checkHostRanges(cidr); err != nil {
		return err
	}
	flags, published, err := rootlessPublished(up, metricsAddr)
	if err != nil {
		return err
	}
	// The node's up learns pasta's pid on this pipe (its fd 3), to end
	// pasta when it stops: pasta keeps the namespace it joined, so it
	// would not end by itself if this process were killed. The pipe is
	// also its lifeline: it ends when this process does, and the node's
	// up then stops as on SIGTERM (a parent-death signal would come once
	// per thread of this process as they end, and a second SIGTERM makes
	// up exit at once).
	pidR, pidW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pidW.Close()
	uid, gid := os.Getuid(), os.Getgid()
	// With subordinate ids (and newuidmap/newgidmap), the namespace maps
	// them to themselves beside the user, written by the helpers once the
	// node's up started (it waits for them, rootlessNodeMappedLater), so
	// that containers may run as other users than root, as with
	// --network=host; without, it maps the user alone.
	ids, idsErr := sandbox.DetectSubIDs()
	marker := rootlessNodeEnv + "=1"
	var uidMap, gidMap []syscall.SysProcIDMap
	if idsErr == nil {
		marker = rootlessNodeEnv + "=" + rootlessNodeMappedLater
	} else {
		uidMap = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		gidMap = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	}
	node := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: rootlessNodeArgs(os.Args, flags),
		Env:  append(os.Environ(), marker),
		// No stdin (up reads none): in a process group of its own a
		// read from the terminal would stop it.
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{pidR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
			UidMappings: uidMap,
			GidMappings: gidMap,
			AmbientCaps: rootlessNodeCaps,
			// Its own process group: a signal reaches it from here,
			// not also from the terminal.
			Setpgid: true,
		},
	}
	// Signals arrive here from now on, for the node's up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	err = node.Start()
	_ = pidR.Close()
	if err != nil {
		return fmt.Errorf("--network=pod as a user: starting up in a user and network namespace of its own: %w (does this machine allow unprivileged user namespaces?); or start with --network=host", err)
	}
	if idsErr == nil {
		if err := ids.MapIdentity(node.Process.Pid); err != nil {
			_ = node.Process.Signal(syscall.SIGKILL)
			_ = node.Wait()
			return fmt.Errorf("--network=pod as a user: mapping your subordinate ids into the node's user namespace: %w; or start with --network=host", err)
		}
	}
	var pastaOut lockedBuffer
	pa := &exec.Cmd{
		Path:   pasta,
		Args:   append([]string{"pasta"}, pastaArgs(published, node.Process.Pid)...),
		Stdout: &pastaOut,
		Stderr: &pastaOut,
		// No parent-death signal: pasta joins the node's user namespace,
		// which clears it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := pa.Start(); err != nil {
		_ = node.Process.Signal(syscall.SIGKILL)
		_ = node.Wait()
		return fmt.Errorf("starting pasta for the node's network: %w", err)
	}
	_, _ = fmt.Fprintf(pidW, "%d\n", pa.Process.Pid)
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- node.Wait() }()
	pastaDone := make(chan error, 1)
	go func() { pastaDone <- pa.Wait() }()
	var relay signalRelay
	for {
		select {
		case s := <-sigs:
			if fwd, ok := relay.relay(s, time.Now()); ok {
				_ = node.Process.Signal(fwd)
			}
		case err := <-pastaDone:
			pastaDone = nil
			// pasta ends early when the node's up did (it attaches to
			// a pid that is gone): then the node's up says why.
			select {
			case nerr := <-nodeDone:
				return rootlessExit(nerr)
			case <-time.After(time.Second):
			}
			// Without pasta the node has no way out: stop it, as a
			// signal would, unless one is already stopping it.
			fmt.Fprintf(os.Stderr, "jobkeeper: pasta, the node network's link to this host, ended (%v); stopping.\n%s", err, pastaOut.String())
			if !relay.stopping {
				fwd, _ := relay.relay(syscall.SIGTERM, time.Now())
				_ = node.Process.Signal(fwd)
			}
		case err := <-nodeDone:
			if pastaDone != nil {
				_ = pa.Process.Signal(syscall.SIGTERM)
				<-pastaDone
			}
			return rootlessExit(err)
		}
	}
}

// checkHostRanges refuses a pod CIDR or the service range that overlaps a
// route of this host's, as startPodNetwork does as root: the rootless
// node's namespace has only pasta's copy of the default route to look at.
func checkHostRanges(cidr netip.Prefix) error {
	// netns.None(): this process's own namespace, which a user may read
	// but not enter.
	return podnet.CheckRanges(netns.None(), podnet.DefaultBridge, podNetworkRanges(cidr))
}

// rootlessExit is runRootlessNode's result for how the node's up ended:
// its exit code (128+signal when killed by one); it printed why.
func rootlessExit(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code <= 0 {
		code = 1
	}
	return &exitError{code: code}
}

// rootlessNodeArgs is the node's up's command line: this one with flags
// added, before a "--" if any (after it they would be arguments).
func rootlessNodeArgs(args, flags []string) []string {
	out := append([]string{}, args...)
	at := len(out)
	for i, a := range out {
		if i > 0 && a == "--" {
			at = i
			break
		}
	}
	return append(append(out[:at:at], flags...), args[at:]...)
}

// signalRelay decides which signals the parent passes on to the node's
// up. A stop asked twice at once (systemd signals every process of the
// unit, so the node's up gets SIGTERM directly and from here) must not
// count as the second Ctrl-C that makes up exit without stopping its
// pods: a termination signal within a second of the last one passed on
// is dropped. SIGHUP (the terminal went away) is passed on as SIGTERM,
// which up stops on.
type signalRelay struct {
	last time.Time
	// stopping says that a termination signal was passed on.
	stopping bool
}

// relayWindow is how close two termination signals are taken as one.
const relayWindow = time.Second

func (r *signalRelay) relay(s os.Signal, now time.Time) (os.Signal, bool) {
	if s == syscall.SIGHUP {
		s = syscall.SIGTERM
	}
	if s != syscall.SIGINT && s != syscall.SIGTERM {
		return s, true
	}
	if r.stopping && now.Sub(r.last) < relayWindow {
		return nil, false
	}
	r.last, r.stopping = now, true
	return s, true
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		// pasta says why it failed in its first lines.
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rootlessDNSForward is where, in the rootless node's namespace, pasta
// answers DNS queries with this host's first resolver (over UDP): what
// the node's up asks instead of a resolver on this host's loopback
// (systemd-resolved's 127.0.0.53, a local dnsmasq), which the namespace's
// loopback is not.
var rootlessDNSForward = netip.MustParseAddr("169.254.1.53")

// rootlessResolvers maps the resolvers of this host's resolv.conf
// (host:port) for the rootless node: one on this host's loopback is
// reached at rootlessDNSForward, once; others as they are.
func rootlessResolvers(servers []string) []string {
	var out []string
	forwarded := false
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && ip.IsLoopback() {
			if forwarded {
				continue
			}
			forwarded, s = true, net.JoinHostPort(rootlessDNSForward.String(), port)
		}
		out = append(out, s)
	}
	return out
}

// resolveThroughPasta makes this process's own lookups (image pulls,
// webhooks) reach a resolver of this host's loopback through pasta.
func resolveThroughPasta() {
	net.DefaultResolver = &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if mapped := rootlessResolvers([]string{address}); len(mapped) == 1 {
				address = mapped[0]
			}
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
	}
}

// pastaPidFD is the descriptor on which the node's up reads pasta's pid.
const pastaPidFD = 3

// watchPasta reads pasta's pid from the parent (pastaPidFD) and returns
// what ends pasta: called as the node's up ends, since pasta holds the
// namespace it joined and would outlive it if the parent were gone. The
// pipe's end is the parent's: this up then ends pasta at once (it may not
// reach its own end: a signal before its handler is set kills it) and
// stops, as on SIGTERM.
func watchPasta() (stop func()) {
	var st unix.Stat_t
	if err := unix.Fstat(pastaPidFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		klog.Background().Info("WARNING: no pipe from the outer up on fd 3: pasta is not ended by this up", "err", err)
		return func() {}
	}
	unix.CloseOnExec(pastaPidFD)
	f := os.NewFile(pastaPidFD, "pasta's pid")
	type target struct {
		pid, pidfd int
	}
	got := make(chan target, 1)
	end := sync.OnceFunc(func() {
		var t target
		select {
		case t = <-got:
		case <-time.After(time.Second):
			return
		}
		switch {
		case t.pidfd >= 0:
			_ = unix.PidfdSendSignal(t.pidfd, unix.SIGTERM, nil, 0)
			_ = unix.Close(t.pidfd)
		case t.pid > 0:
			_ = unix.Kill(t.pid, unix.SIGTERM)
		}
	})
	go func() {
		t := target{pidfd: -1}
		var pid int
		// No pid when the parent died before it started pasta: then
		// there is none to end.
		if _, err := fmt.Fscan(f, &pid); err == nil && pid > 0 {
			t.pid = pid
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				t.pidfd = fd
			}
		}
		got <- t
		// Nothing more comes: the pipe ends with the parent, which
		// outlives this up unless it was killed.
		_, _ = io.Copy(io.Discard, f)
		end()
		_ = unix.Kill(os.Getpid(), unix.SIGTERM)
	}()
	return end
}

// enterRootlessNode prepares the up inside the rootless node: its
// loopback up, and pasta's route out, waited for. The pod network's lock
// is the data directory's: this namespace is the only one that holds it.
// stopPasta ends pasta as this up ends.
func enterRootlessNode(dataDir string) (stopPasta func(), err error) {
	_ = os.Unsetenv(rootlessNodeEnv)
	// The parent may be gone and its output with it (a reader that closed
	// the pipe): a write to stdout must not kill this up before it ended
	// pasta, as SIGPIPE would.
	signal.Ignore(syscall.SIGPIPE)
	stopPasta = watchPasta()
	defer func() {
		if err != nil {
			stopPasta()
		}
	}()
	podNetworkLock = filepath.Join(dataDir, "podnet.lock")
	if servers, err := clusterdns.UpstreamsFromResolvConf(podconfig.HostResolvConf); err == nil && !slices.Equal(servers, rootlessResolvers(servers)) {
		resolveThroughPasta()
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return stopPasta, fmt.Errorf("the node namespace's loopback: %w", err)
	}
	deadline := time.Now().Add(rootlessNetworkWait)
	for {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return stopPasta, fmt.Errorf("the node namespace's routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				return stopPasta, nil
			}
		}
		if time.Now().After(deadline) {
			return stopPasta, fmt.Errorf("pasta did not give the node's network namespace a route out within %v", rootlessNetworkWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
