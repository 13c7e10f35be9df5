package binder

import (
	corev1 "k8s.io/api/core/v1"
)

// hostPortsTaken is the scheduler's NodePorts message for a pod whose
// hostPort another pod on the node holds.
const hostPortsTaken = "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."

// hostPort is one port a pod holds on the node.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

// hostPortsOf are the host ports pod asks for: its containers' and init
// containers' ports with a hostPort, as the scheduler's NodePorts plugin
// reads them (a hostNetwork pod's hostPorts are its containerPorts, which
// the API's defaulting sets).
func hostPortsOf(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []corev1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				ip := p.HostIP
				if ip == "" {
					ip = "0.0.0.0"
				}
				out = append(out, hostPort{ip: ip, protocol: proto, port: p.HostPort})
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}

// conflicts reports whether want and held share a port: the same port and
// protocol, and the same address or either on every address (0.0.0.0).
func conflicts(want, held hostPort) bool {
	if want.port != held.port || want.protocol != held.protocol {
		return false
	}
	return want.ip == held.ip || want.ip == "0.0.0.0" || held.ip == "0.0.0.0"
}

// portsFree reports whether none of pod's host ports is held.
func portsFree(pod *corev1.Pod, held []hostPort) bool {
	for _, w := range hostPortsOf(pod) {
		for _, h := range held {
			if conflicts(w, h) {
				return false
			}
		}
	}
	return true
}

// HostPortsTaken reports whether one of pod's host ports is held by one of
// others that has not finished, as the kubelet's admission checks a pod
// bound to its node (by the scheduler or by nodeName) against the pods it
// runs.
func HostPortsTaken(pod *corev1.Pod, others []*corev1.Pod) bool {
	return !portsFree(pod, heldPorts(others))
}

// heldPorts are the host ports of the pods bound to the node that have not
// finished.
func heldPorts(bound []*corev1.Pod) []hostPort {
	var out []hostPort
	for _, p := range bound {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, hostPortsOf(p)...)
	}
	return out
}
