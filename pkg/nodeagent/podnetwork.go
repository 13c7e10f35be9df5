package nodeagent

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
)

// A pod gets a network namespace of its own where the agent has a
// PodNetwork (Options.PodNetwork, `up --network=pod` as root) and the pod
// is not hostNetwork: created with the pod's first container, kept for the
// pod's life (across container restarts and agent restarts), and removed
// once the pod finished or left. Its address is the pod's status.podIP,
// which the environment, /etc/hosts, probes, hooks and port-forward use.

// PodNetwork gives pods network namespaces of their own (podnet.Pods).
type PodNetwork interface {
	// Ensure returns the file of pod uid's namespace and its address,
	// creating and wiring them when missing.
	Ensure(uid string) (string, netip.Addr, error)
	// Lookup returns them if the pod has both.
	Lookup(uid string) (string, netip.Addr, bool)
	// Remove removes the pod's namespace and frees its address.
	Remove(uid string) error
	// Prune removes those of the pods for which live is false.
	Prune(live func(uid string) bool) error
	// DialContext connects to addr from inside the pod's namespace.
	DialContext(ctx context.Context, uid, network, addr string) (net.Conn, error)
	// MapPorts sets the pod's host ports (none: it has none).
	MapPorts(uid string, ports []podnet.PortMapping) error
}

// ReasonFailedCreatePodSandBox is the kubelet's Warning event of a pod
// whose sandbox (here: its network namespace) could not be made.
const ReasonFailedCreatePodSandBox = "FailedCreatePodSandBox"

// sandboxRetry is how long a container waits before its pod's network is
// tried again.
const sandboxRetry = 10 * time.Second

// ownNetwork reports whether pod gets a network namespace of its own.
func (a *Agent) ownNetwork(pod *corev1.Pod) bool {
	return a.opts.PodNetwork != nil && !pod.Spec.HostNetwork
}

// ensureNetwork gives the worker's pod its network namespace, if it gets
// one, before container c starts: false when it could not, and c then
// waits (ContainerCreating) with a FailedCreatePodSandBox event, to be
// tried again.
func (w *worker) ensureNetwork(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) bool {
	if !w.agent.ownNetwork(pod) {
		return true
	}
	path, ip, err := w.agent.opts.PodNetwork.Ensure(string(pod.UID))
	if err != nil {
		msg := "Failed to create pod sandbox: setting up the pod's network: " + err.Error()
		klog.FromContext(ctx).Info("Pod network failed", "pod", klog.KObj(pod), "err", err)
		w.agent.event(pod, corev1.EventTypeWarning, ReasonFailedCreatePodSandBox, msg)
		w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvImageWait, At: now, Reason: lifecycle.ReasonContainerCreating, Message: msg, Retry: now.Add(sandboxRetry)})
		return false
	}
	w.netns, w.podIP = path, ip.String()
	w.mapPorts(ctx, pod)
	return true
}

// mapPorts gives the pod its host ports once its network is up (again
// after an agent restart, whose table started empty). A failure is
// logged and tried again at the next start of a container.
func (w *worker) mapPorts(ctx context.Context, pod *corev1.Pod) {
	if err := w.agent.opts.PodNetwork.MapPorts(string(pod.UID), hostPorts(pod)); err != nil {
		klog.FromContext(ctx).Info("Mapping the pod's host ports failed", "pod", klog.KObj(pod), "err", err)
		return
	}
	w.portsMapped = true
}

// hostPorts are the pod's hostPorts, as the kubelet hands them to the
// network plugin: the containers' and the sidecars' ports with a
// hostPort, TCP and UDP (SCTP is not mapped).
func hostPorts(pod *corev1.Pod) []podnet.PortMapping {
	var out []podnet.PortMapping
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 || p.HostPort > 65535 || p.ContainerPort <= 0 || p.ContainerPort > 65535 {
				continue
			}
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP && p.Protocol != corev1.ProtocolUDP {
				continue
			}
			m := podnet.PortMapping{HostPort: uint16(p.HostPort), ContainerPort: uint16(p.ContainerPort), UDP: p.Protocol == corev1.ProtocolUDP}
			if ip, err := netip.ParseAddr(p.HostIP); err == nil && ip.Is4() {
				m.HostIP = ip
			}
			out = append(out, m)
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// withPodIP is pod as its containers are configured: its status carries
// the node's address and the pod's own once it has one (the environment's
// status.hostIP and status.podIP), or the node's when it shares the
// node's network, as the status the agent reports will.
func (w *worker) withPodIP(pod *corev1.Pod) *corev1.Pod {
	ip := w.agent.opts.NodeIP
	if w.agent.ownNetwork(pod) {
		ip = w.podIP
	}
	if pod.Status.HostIP == w.agent.opts.NodeIP && (ip == "" || pod.Status.PodIP == ip) {
		return pod
	}
	p := *pod
	p.Status.HostIP, p.Status.HostIPs = w.agent.opts.NodeIP, []corev1.HostIP{{IP: w.agent.opts.NodeIP}}
	if ip != "" {
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	return &p
}

// knownPodIP returns the pod's own address, looked up once the worker
// does not know it yet (a restarted agent's pod); "" when the pod has
// none yet; the node's when it shares the node's network (probes and
// hooks reach it there, as the kubelet reaches a hostNetwork pod's).
func (w *worker) knownPodIP(pod *corev1.Pod) string {
	if !w.agent.ownNetwork(pod) {
		return w.agent.opts.NodeIP
	}
	if w.podIP == "" {
		if path, ip, ok := w.agent.opts.PodNetwork.Lookup(string(pod.UID)); ok {
			w.netns, w.podIP = path, ip.String()
		}
	}
	if w.podIP != "" && !w.portsMapped {
		// A restarted agent's running pod.
		w.mapPorts(context.Background(), pod)
	}
	return w.podIP
}

// releaseNetwork removes pod uid's network namespace, if the agent gives
// pods one: the pod finished, or left the API. What fails is logged; the
// next start of the agent prunes it.
func (a *Agent) releaseNetwork(ctx context.Context, uid types.UID) {
	if a.opts.PodNetwork == nil {
		return
	}
	if err := a.opts.PodNetwork.Remove(string(uid)); err != nil {
		klog.FromContext(ctx).Info("Removing a pod's network failed", "uid", uid, "err", err)
	}
}

// pruneNetworks removes, at the agent's start, the network namespaces of
// pods that left the API or finished while it was away. Workers run
// meanwhile: a pod with a worker, or live in the API as the cache has it
// now (not as when the prune began), keeps its namespace.
func (a *Agent) pruneNetworks(ctx context.Context) {
	if a.opts.PodNetwork == nil {
		return
	}
	live := func(uid string) bool {
		a.mu.Lock()
		w := a.workers[types.UID(uid)]
		a.mu.Unlock()
		if w != nil {
			return true
		}
		pods, _ := a.podLister.List(everything)
		for _, p := range pods {
			if string(p.UID) == uid {
				return p.Spec.NodeName == a.opts.NodeName && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
			}
		}
		return false
	}
	if err := a.opts.PodNetwork.Prune(live); err != nil {
		klog.FromContext(ctx).Info("Removing networks of pods gone failed", "err", err)
	}
}

// dialPod connects to port of a pod with a network of its own from inside
// its namespace (port-forward, as CRI runtimes do: a server on the pod's
// loopback is reached too); false for a pod sharing the node's.
func (a *Agent) dialPod(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, bool, error) {
	if !a.ownNetwork(pod) {
		return nil, false, nil
	}
	conn, err := a.opts.PodNetwork.DialContext(ctx, string(pod.UID), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	return conn, true, err
}
