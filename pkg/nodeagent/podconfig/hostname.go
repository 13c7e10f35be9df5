package podconfig

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxHostnameLen is the longest hostname a pod gets: 64 bytes with the
// terminating NUL, as the kubelet caps it.
const maxHostnameLen = 63

// PodHostname is the hostname of pod's containers, as the kubelet computes
// it: spec.hostname, or else the pod's name, cut to 63 characters without
// a trailing '-' or '.'. It is the HOSTNAME variable, /etc/hostname and,
// where the runtime gives containers a UTS namespace, what hostname
// prints.
func PodHostname(pod *corev1.Pod) string {
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if len(hostname) <= maxHostnameLen {
		return hostname
	}
	return strings.TrimRight(hostname[:maxHostnameLen], "-.")
}

// NodeIP is the only address of the local node; pods share it.
const NodeIP = "127.0.0.1"
