// Package server serves the kubelet's endpoints that the apiserver proxies
// to, over TLS to the apiserver only (a client certificate signed by the
// cluster's CA with an allowed common name): /containerLogs (logserver.go),
// exec, attach and portForward with the kubelet's own streaming library
// (streaming.go), and /healthz.
//
// It may not start, stop or change containers beyond what a streaming
// request asks of a running one, and reads the agent's state only through
// Config: the pod lister, the log paths, and Container for what a pod
// worker knows of a container. It imports no node agent package above it.
package server
