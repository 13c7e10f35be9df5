package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	endpointcontroller "k8s.io/kubernetes/pkg/controller/endpoint"
	endpointslicecontroller "k8s.io/kubernetes/pkg/controller/endpointslice"
	endpointslicemirroringcontroller "k8s.io/kubernetes/pkg/controller/endpointslicemirroring"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/clusterdns"
	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
	"jobkeeper.dev/jobkeeper/pkg/serviceproxy"
)

// The network modes of `up --network`.
const (
	networkPod  = "pod"
	networkHost = "host"
)

// errPodNetworkNeedsRoot refuses --network=pod as another user.
const errPodNetworkNeedsRoot = "--network=pod needs root (pods' network namespaces, the node's bridge and its nftables rules): run as root, or start with --network=host to share this host's network"

// The cluster's addresses beside the pod CIDR: the Service CIDR is the
// apiserver's (controlplane), whose first address is the kubernetes
// Service's; the cluster DNS Service takes the tenth, as kubeadm's does.
var (
	serviceCIDR    = netip.MustParsePrefix(controlplane.ServiceCIDR)
	kubernetesIP   = serviceCIDR.Addr().Next()
	clusterDNSIP   = netip.AddrFrom4([4]byte{serviceCIDR.Addr().As4()[0], serviceCIDR.Addr().As4()[1], serviceCIDR.Addr().As4()[2], 10})
	clusterDNSName = "kube-dns"
)

// The endpoints controllers' settings, kube-controller-manager's defaults.
const (
	endpointSliceWorkers  = 5
	maxEndpointsPerSlice  = 100
	mirroringWorkers      = 5
	maxEndpointsPerSubset = 1000
	endpointsWorkers      = 5
)

// podNetwork is `up --network=pod`: the node's side of the pod network,
// the pods' namespaces, a relay from the kubernetes Service to the
// apiserver, the cluster DNS server, and upstream's endpoints controllers.
type podNetwork struct {
	pods *podnet.Pods
	// host is the node's network namespace, where the Services' rules
	// are.
	host netns.NsHandle
	// lock is the host-wide lock of the pod network, held while it runs;
	// dir is its state directory.
	lock *os.File
	dir  string
	// cancel ends the servers and controllers; wg waits for them.
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// networkDir is where the pod network keeps its state under the node's
// data directory: the addresses (ipam) and the pinned namespaces (netns).
func networkDir(nodeDir string) string { return filepath.Join(nodeDir, "podnet") }

// nodeAddress is the node's address on the pod network of cidr: its first.
func nodeAddress(cidr netip.Prefix) netip.Addr { return cidr.Masked().Addr().Next() }

// podNetworkRanges are the ranges the pod network routes, which no route
// of this host's may overlap, by the flag a user changes.
func podNetworkRanges(cidr netip.Prefix) map[string]netip.Prefix {
	return map[string]netip.Prefix{
		"pod CIDR (--pod-cidr)": cidr,
		"service CIDR":          serviceCIDR,
	}
}

// startPodNetwork sets the pod network up for the node whose data
// directory is nodeDir, with pod CIDR cidr, and runs what serves it until
// ctx ends.
func startPodNetwork(ctx context.Context, cp *controlplane.ControlPlane, nodeDir string, cidr netip.Prefix) (*podNetwork, error) {
	if !canNetworkPods() {
		return nil, errors.New(errPodNetworkNeedsRoot)
	}
	lock, err := lockPodNetwork(filepath.Dir(nodeDir))
	if err != nil {
		return nil, err
	}
	host, err := netns.Get()
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("--network=pod: this host's network namespace: %w; start with --network=host to share this host's network", err)
	}
	ok := false
	defer func() {
		if !ok {
			host.Close()
			_ = lock.Close()
		}
	}()
	if err := podnet.CheckRanges(host, podnet.DefaultBridge, podNetworkRanges(cidr)); err != nil {
		return nil, err
	}
	apiserver, err := url.Parse(cp.URL())
	if err != nil {
		return nil, fmt.Errorf("the apiserver's URL %q: %w", cp.URL(), err)
	}
	gw := nodeAddress(cidr)
	relay := netip.AddrPortFrom(gw, 443)
	dns := netip.AddrPortFrom(gw, 53)
	node, err := podnet.SetUp(podnet.Config{
		PodCIDR:     cidr,
		StateDir:    filepath.Join(networkDir(nodeDir), "ipam"),
		ServiceCIDR: serviceCIDR,
		Redirects: []podnet.Redirect{
			{From: netip.AddrPortFrom(kubernetesIP, 443), To: relay},
			{From: netip.AddrPortFrom(clusterDNSIP, 53), To: dns},
			{From: netip.AddrPortFrom(clusterDNSIP, 53), To: dns, UDP: true},
		},
	}, host)
	if err != nil {
		return nil, fmt.Errorf("--network=pod: %w; start with --network=host to share this host's network", err)
	}
	// What fails from here on takes the network away again: nothing of
	// it is left on the host by a start that did not happen.
	ctx, cancel := context.WithCancel(ctx)
	pn := &podNetwork{host: host, cancel: cancel, lock: lock, dir: networkDir(nodeDir)}
	fail := func(err error) (*podNetwork, error) {
		cancel()
		pn.wg.Wait()
		if tdErr := errors.Join(serviceproxy.Remove(host), node.TearDown(), podnet.UnpinAll(filepath.Join(networkDir(nodeDir), "netns"))); tdErr != nil {
			klog.FromContext(ctx).Info("Removing the pod network after a failed start failed", "err", tdErr)
		}
		return nil, err
	}
	if pn.pods, err = podnet.NewPods(node, filepath.Join(networkDir(nodeDir), "netns")); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", relay.String())
	if err != nil {
		return fail(fmt.Errorf("the relay from the kubernetes Service to the apiserver: %w", err))
	}
	pn.wg.Go(func() { relayTCP(ctx, ln, apiserver.Host) })
	if err := pn.startServices(ctx, cp, host, dns.String(), relay, cidr); err != nil {
		return fail(err)
	}
	if err := pn.startEndpointsControllers(ctx, cp); err != nil {
		return fail(err)
	}
	ok = true
	return pn, nil
}

// stop ends the servers and controllers and waits for them, then removes
// the pod network, or, when keep is set (containers left running for the
// next up), leaves it for the next up to take over.
func (pn *podNetwork) stop(keep bool) {
	pn.cancel()
	pn.wg.Wait()
	defer func() { _ = pn.lock.Close() }()
	defer pn.host.Close()
	if keep {
		pn.pods.Node().Close()
		return
	}
	if err := errors.Join(serviceproxy.Remove(pn.host), pn.pods.TearDown(), os.Remove(pn.dir)); err != nil {
		klog.Background().Info("Removing the pod network failed", "err", err)
	}
}

// startServices routes the Services' cluster IPs (serviceproxy, in host's
// tables) and serves the cluster's DNS on addr, the node's address on the
// pod network, which the kube-dns Service's address is sent to; the
// Service is created when missing, so that pods and tools find it where
// they look. Both follow the same caches of Services and EndpointSlices.
func (pn *podNetwork) startServices(ctx context.Context, cp *controlplane.ControlPlane, host netns.NsHandle, addr string, relay netip.AddrPort, cidr netip.Prefix) error {
	cfg := controlplane.ProtobufConfig(cp.AdminConfig())
	cfg.UserAgent = "jobkeeper-services"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := ensureDNSService(ctx, client); err != nil {
		return err
	}
	if err := ensureAPIServerEndpoints(ctx, client, relay); err != nil {
		return err
	}
	upstreams, err := clusterdns.UpstreamsFromResolvConf(podconfig.HostResolvConf)
	if err != nil {
		klog.FromContext(ctx).Info("No upstream resolvers: names outside the cluster will not resolve in pods", "err", err)
	}
	if inRootlessNode {
		upstreams = rootlessResolvers(upstreams)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields))
	services, slices := factory.Core().V1().Services().Informer(), factory.Discovery().V1().EndpointSlices().Informer()
	if err := clusterdns.AddIndexers(services, slices); err != nil {
		return err
	}
	srv, err := clusterdns.New(clusterdns.Options{Upstreams: upstreams, ReverseCIDRs: []netip.Prefix{cidr, serviceCIDR}}, services, slices)
	if err != nil {
		return err
	}
	// The kubernetes and kube-dns Services are sent to the node's relay
	// and DNS server (podnet's redirects).
	proxy, err := serviceproxy.New(host, services, slices, func(s *corev1.Service) bool {
		return (s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes") ||
			(s.Namespace == metav1.NamespaceSystem && s.Name == clusterDNSName)
	})
	if err != nil {
		return err
	}
	pc, l, err := clusterdns.Listen(addr)
	if err != nil {
		return fmt.Errorf("the cluster DNS server on %s: %w", addr, err)
	}
	factory.Start(ctx.Done())
	pn.wg.Go(func() { proxy.Run(ctx) })
	pn.wg.Go(func() {
		if err := srv.Serve(ctx, pc, l); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "The cluster DNS server stopped")
		}
	})
	pn.wg.Go(factory.Shutdown)
	return nil
}

// ensureDNSService creates kube-system/kube-dns at the cluster DNS address
// unless it exists (an earlier up's). It selects no pods: the node sends
// what reaches its address to the server. One elsewhere is refused.
func ensureDNSService(ctx context.Context, client kubernetes.Interface) error {
	old, err := client.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, clusterDNSName, metav1.GetOptions{})
	switch {
	case err == nil && old.Spec.ClusterIP == clusterDNSIP.String():
		return nil
	case err == nil:
		return fmt.Errorf("the Service %s/%s has the address %s, not the cluster DNS's %s: delete it, and up creates it again", metav1.NamespaceSystem, clusterDNSName, old.Spec.ClusterIP, clusterDNSIP)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the cluster DNS Service: %w", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSName, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "app.kubernetes.io/managed-by": "jobkeeper-up"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterDNSIP.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	_, err = client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: refuseFieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the cluster DNS Service %s/%s at %s: %w", svc.Namespace, svc.Name, clusterDNSIP, err)
	}
	return nil
}

// ensureAPIServerEndpoints publishes where pods reach the apiserver, the
// node's relay, as the kubernetes Service's Endpoints and EndpointSlice,
// both named kubernetes in the default namespace, as kube-apiserver's
// endpoint reconciler publishes its own address (its reconciler is off:
// the apiserver listens on loopback only). The Endpoints are labelled not
// to be mirrored, and the slice carries no managed-by label, as the
// reconciler's, so that neither endpoints controller takes them over.
// What an earlier up wrote with another address is replaced.
func ensureAPIServerEndpoints(ctx context.Context, client kubernetes.Interface, relay netip.AddrPort) error {
	const name, portName = "kubernetes", "https"
	ip, port := relay.Addr().String(), int32(relay.Port())
	endpoints := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: ip}},
			Ports:     []corev1.EndpointPort{{Name: portName, Port: port, Protocol: corev1.ProtocolTCP}},
		}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	create := metav1.CreateOptions{FieldManager: refuseFieldManager}
	update := metav1.UpdateOptions{FieldManager: refuseFieldManager}
	old, err := client.CoreV1().Endpoints(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.CoreV1().Endpoints(metav1.NamespaceDefault).Create(ctx, endpoints, create)
	case err == nil && !equality.Semantic.DeepEqual(old.Subsets, endpoints.Subsets):
		endpoints.ResourceVersion = old.ResourceVersion
		_, err = client.CoreV1().Endpoints(metav1.NamespaceDefault).Update(ctx, endpoints, update)
	}
	if err != nil {
		return fmt.Errorf("publishing the apiserver's Endpoints (default/kubernetes): %w", err)
	}
	oldSlice, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, create)
	case err == nil && !(equality.Semantic.DeepEqual(oldSlice.Endpoints, slice.Endpoints) && equality.Semantic.DeepEqual(oldSlice.Ports, slice.Ports)):
		slice.ResourceVersion = oldSlice.ResourceVersion
		_, err = client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, update)
	}
	if err != nil {
		return fmt.Errorf("publishing the apiserver's EndpointSlice (default/kubernetes): %w", err)
	}
	return nil
}

// startEndpointsControllers runs upstream's EndpointSlice, EndpointSlice
// mirroring and Endpoints controllers, as kube-controller-manager does, on
// caches of their own: the other controllers' pod cache is slimmed of what
// these read (addresses, ports, readiness).
func (pn *podNetwork) startEndpointsControllers(ctx context.Context, cp *controlplane.ControlPlane) error {
	cfg := controlplane.ProtobufConfig(cp.AdminConfig())
	cfg.UserAgent = "jobkeeper-up-endpoints-controllers"
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields))
	core, discovery := factory.Core().V1(), factory.Discovery().V1()
	slices := endpointslicecontroller.NewController(ctx, core.Pods(), core.Services(), core.Nodes(), discovery.EndpointSlices(),
		maxEndpointsPerSlice, client, 0)
	mirroring := endpointslicemirroringcontroller.NewController(ctx, core.Endpoints(), discovery.EndpointSlices(), core.Services(),
		maxEndpointsPerSubset, client, 0)
	endpoints := endpointcontroller.NewEndpointController(ctx, core.Pods(), core.Services(), core.Endpoints(), client, 0)
	factory.Start(ctx.Done())
	pn.wg.Go(func() { slices.Run(ctx, endpointSliceWorkers) })
	pn.wg.Go(func() { mirroring.Run(ctx, mirroringWorkers) })
	pn.wg.Go(func() { endpoints.Run(ctx, endpointsWorkers) })
	pn.wg.Go(factory.Shutdown)
	klog.FromContext(ctx).Info("Started upstream controllers", "controllers", []string{"endpointslice", "endpointslicemirroring", "endpoints"})
	return nil
}

// dropManagedFields is an informer transform that drops what no reader of
// these caches uses.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// relayTCP accepts connections on ln until ctx ends and relays each to
// target: pods reach the apiserver, which listens on the node's loopback,
// at the kubernetes Service's address.
func relayTCP(ctx context.Context, ln net.Listener, target string) {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var conns sync.WaitGroup
	defer conns.Wait()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: tried again, as net/http's
			// server does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			klog.FromContext(ctx).Error(err, "The relay to the apiserver cannot accept; trying again", "delay", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		conns.Go(func() { relayConn(ctx, c, target) })
	}
}

// relayConn copies between c and a new connection to target, both ways,
// until both sides closed or ctx ended.
func relayConn(ctx context.Context, c net.Conn, target string) {
	defer c.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Relaying to the apiserver failed", "from", c.RemoteAddr().String(), "err", err)
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() {
		_ = c.Close()
		_ = up.Close()
	})
	defer stop()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}

// resetPodNetwork removes what an up with --network=pod left on this host
// for the node whose data directory is nodeDir (a crash, kill -9, or
// --keep-running-on-stop): the pinned namespaces, and, unless another up
// has the host's pod network now, the bridge with its veths, the nftables
// tables and the addresses. It returns what it did, for reset to say ("":
// there was no pod network).
func resetPodNetwork(nodeDir string) (string, error) {
	dir := networkDir(nodeDir)
	if _, err := os.Stat(dir); err != nil {
		return "", nil
	}
	if err := podnet.UnpinAll(filepath.Join(dir, "netns")); err != nil {
		return "", fmt.Errorf("removing the pods' network namespaces: %w", err)
	}
	lock, err := lockPodNetwork(filepath.Dir(nodeDir))
	if err != nil {
		// Another up's: its bridge and tables stay.
		return "Removed the pods' network namespaces; left this host's pod network alone: " + err.Error(), os.RemoveAll(dir)
	}
	defer func() { _ = lock.Close() }()
	host, err := netns.Get()
	if err != nil {
		return "", err
	}
	defer host.Close()
	if err := errors.Join(serviceproxy.Remove(host), podnet.RemoveNode(host, podnet.DefaultBridge, filepath.Join(dir, "ipam"))); err != nil {
		return "", fmt.Errorf("removing the pod network: %w", err)
	}
	return fmt.Sprintf("Removed the pod network (bridge %s, its veths, the pods' network namespaces and the nftables tables %s and %s)",
		podnet.DefaultBridge, podnet.Table, serviceproxy.Table), os.RemoveAll(dir)
}

// systemdResolvConf is systemd-resolved's list of the host's real
// nameservers, beside the stub at 127.0.0.53 that /etc/resolv.conf names.
const systemdResolvConf = "/run/systemd/resolve/resolv.conf"

// podsResolvConf is the resolver configuration pods with a network of
// their own start from (dnsPolicy Default, and the searches of
// ClusterFirst): the host's, unless its nameservers are all on its
// loopback, which a pod's namespace does not reach, and systemd-resolved
// lists the real ones (as kubeadm points the kubelet's --resolv-conf at
// it).
func podsResolvConf() string {
	host, err := os.ReadFile(podconfig.HostResolvConf)
	if err != nil || !onlyLoopbackNameservers(host) {
		return podconfig.HostResolvConf
	}
	if _, err := os.Stat(systemdResolvConf); err == nil {
		return systemdResolvConf
	}
	return podconfig.HostResolvConf
}

// onlyLoopbackNameservers reports whether every nameserver of a
// resolv.conf is a loopback address (and there is one).
func onlyLoopbackNameservers(conf []byte) bool {
	n := 0
	for _, line := range strings.Split(string(conf), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		ip, err := netip.ParseAddr(f[1])
		if err != nil || !ip.IsLoopback() {
			return false
		}
		n++
	}
	return n > 0
}

// podNetworkLock is the host-wide lock of the pod network (a variable for
// tests): one bridge,
// one set of tables and one address range per host, so one up at a time
// has them. It holds the data directory of the up that has it.
var podNetworkLock = "/run/jobkeeper-podnet.lock"

// lockPodNetwork takes the pod network's lock for the up of dataDir, or
// says which up has it. Closing the file releases it.
func lockPodNetwork(dataDir string) (*os.File, error) {
	f, err := os.OpenFile(podNetworkLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the pod network's lock %s: %w", podNetworkLock, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another jobkeeper up (data directory %s) has this host's pod network (bridge %s): stop it, or start this one with --network=host",
				strings.TrimSpace(string(owner)), podnet.DefaultBridge)
		}
		return nil, fmt.Errorf("locking %s: %w", podNetworkLock, err)
	}
	// The last holder may have left its network running for its next up
	// (--keep-running-on-stop): its pods keep their addresses, which
	// another data directory's up would hand out again.
	prev, _ := io.ReadAll(f)
	if owner := strings.TrimSpace(string(prev)); owner != "" && owner != dataDir {
		if _, err := os.Stat(networkDir(filepath.Join(owner, "node"))); err == nil {
			_ = f.Close()
			return nil, fmt.Errorf("this host's pod network (bridge %s) was left running by the jobkeeper up of %s for its next start (--keep-running-on-stop): start that one again, or run jobkeeper reset --data-dir %s, or start this one with --network=host",
				podnet.DefaultBridge, owner, owner)
		}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(dataDir+"\n"), 0)
	return f, nil
}

// podNetworkUnavailable says why up cannot give pods networks of their own
// on this host now, "" when it can: the check behind --network's default,
// which then falls back to the host's network rather than failing.
func podNetworkUnavailable(dataDir string) string {
	lock, err := lockPodNetwork(dataDir)
	if err != nil {
		return err.Error()
	}
	_ = lock.Close()
	c, err := nftables.New()
	if err == nil {
		_, err = c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	}
	if err != nil {
		return "nftables is not available: " + err.Error()
	}
	return ""
}
