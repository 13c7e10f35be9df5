package podconfig

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// maxHostnameLen is the longest hostname a pod gets: 64 bytes with the
// terminating NUL, as the kubelet caps it.
const maxHostnameLen = 63

// PodHostname is the hostname of pod's containers, as the kubelet computes
// it: spec.hostnameOverride (HostnameOverride, beta and on in v1.36), else
// spec.hostname, else the pod's name, cut to 63 characters without a
// trailing '-' or '.'. It is the HOSTNAME variable, /etc/hostname and,
// where the runtime gives containers a UTS namespace, what hostname
// prints.
func PodHostname(pod *corev1.Pod) string {
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if o := pod.Spec.HostnameOverride; o != nil && *o != "" {
		hostname = *o
	}
	if len(hostname) <= maxHostnameLen {
		return hostname
	}
	return strings.TrimRight(hostname[:maxHostnameLen], "-.")
}

// podSubdomain is the pod's subdomain as its hostname uses it: none when
// hostnameOverride replaces the hostname (the kubelet then gives the pod no
// domain: no FQDN in /etc/hosts, none for setHostnameAsFQDN).
func podSubdomain(pod *corev1.Pod) string {
	if o := pod.Spec.HostnameOverride; o != nil && *o != "" {
		return ""
	}
	return pod.Spec.Subdomain
}

// NodeIP is the only address of the local node; pods share it.
const NodeIP = "127.0.0.1"
