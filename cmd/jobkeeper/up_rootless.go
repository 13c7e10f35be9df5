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
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// rootlessNodeEnv marks the up that runs inside the rootless node's
// namespaces; it is removed from the environment as that up starts.
const rootlessNodeEnv = "_JOBKEEPER_ROOTLESS_NODE"

// inRootlessNode says that this process is the up inside the rootless
// node's namespaces (read once, before anything changes the environment).
var inRootlessNode = os.Getenv(rootlessNodeEnv) == "1"

// rootlessNodeCaps are the capabilities up holds in the node's user
// namespace: the network's (links, routes, nftables, sysctls), entering
// pods' network namespaces and pinning them (CAP_SYS_ADMIN, in that
// namespace only), and the DNS's and the relay's ports below 1024.
var rootlessNodeCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_ADMIN}

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
		if mp, err = hostPortFor(host, mp, 0); err != nil {
			return nil, nil, err
		}
		flags = append(flags, "--metrics-bind-address="+net.JoinHostPort(host, strconv.Itoa(mp)))
		spec := strconv.Itoa(mp)
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
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
// bound on the namespace's loopback (-T/-U auto).
func pastaArgs(published []string, pid int) []string {
	args := []string{"--config-net", "--no-map-gw", "--quiet", "--foreground", "-u", "none", "-T", "auto", "-U", "auto"}
	args = append(args, published...)
	return append(args, strconv.Itoa(pid))
}

// runRootlessNode runs this up again, as the same user, inside a user,
// network and mount namespace of its own connected to this host by pasta,
// and returns as it ends (with its exit code). Signals to this process
// are passed on to it; when this process dies it gets SIGTERM.
func runRootlessNode(up *upOptions, metricsAddr string) error {
	pasta, err := rootlessPrerequisites()
	if err != nil {
		return err
	}
	flags, published, err := rootlessPublished(up, metricsAddr)
	if err != nil {
		return err
	}
	// The parent-death signals below fire when the thread that started
	// the child ends, not the process: keep this goroutine on one thread
	// until both children ended.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	uid, gid := os.Getuid(), os.Getgid()
	node := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   append(append([]string{os.Args[0]}, os.Args[1:]...), flags...),
		Env:    append(os.Environ(), rootlessNodeEnv+"=1"),
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
			AmbientCaps: rootlessNodeCaps,
			// Its own process group: a signal reaches it once, from
			// here, not also from the terminal.
			Setpgid:   true,
			Pdeathsig: syscall.SIGTERM,
		},
	}
	// Signals arrive here from now on, for the node's up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := node.Start(); err != nil {
		return fmt.Errorf("--network=pod as a user: starting up in a user and network namespace of its own: %w (does this machine allow unprivileged user namespaces?); or start with --network=host", err)
	}
	var pastaOut lockedBuffer
	pa := &exec.Cmd{
		Path:        pasta,
		Args:        append([]string{"pasta"}, pastaArgs(published, node.Process.Pid)...),
		Stdout:      &pastaOut,
		Stderr:      &pastaOut,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM},
	}
	if err := pa.Start(); err != nil {
		_ = node.Process.Signal(syscall.SIGKILL)
		_ = node.Wait()
		return fmt.Errorf("starting pasta for the node's network: %w", err)
	}
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- node.Wait() }()
	pastaDone := make(chan error, 1)
	go func() { pastaDone <- pa.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = node.Process.Signal(s)
		case err := <-pastaDone:
			// Without pasta the node has no way out: stop it, as a
			// signal would.
			fmt.Fprintf(os.Stderr, "jobkeeper: pasta, the node network's link to this host, ended (%v); stopping.\n%s", err, pastaOut.String())
			_ = node.Process.Signal(syscall.SIGTERM)
			pastaDone = nil
		case err := <-nodeDone:
			if pastaDone != nil {
				_ = pa.Process.Signal(syscall.SIGTERM)
				<-pastaDone
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code := ee.ExitCode()
				if code < 0 {
					code = 1
				}
				// The node's up printed why.
				return &exitError{code: code}
			}
			return err
		}
	}
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

// enterRootlessNode prepares the up inside the rootless node: its
// loopback up, and pasta's route out, waited for. The pod network's lock
// is the data directory's: this namespace is the only one that holds it.
func enterRootlessNode(dataDir string) error {
	_ = os.Unsetenv(rootlessNodeEnv)
	podNetworkLock = filepath.Join(dataDir, "podnet.lock")
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("the node namespace's loopback: %w", err)
	}
	deadline := time.Now().Add(rootlessNetworkWait)
	for {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("the node namespace's routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pasta did not give the node's network namespace a route out within %v", rootlessNetworkWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
