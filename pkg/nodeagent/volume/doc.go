// Package volume owns a pod's volumes on the host, as the kubelet's
// volumemanager does for one machine: a directory per volume under the
// pod's directory, or the host path itself, for the runtime to mount in
// each container's view.
//
//   - Manager.Mounts prepares a pod's volumes once (volumes.go) and returns a
//     container's mounts (subPath and subPathExpr resolved there);
//   - configMap, secret, downwardAPI and projected volumes (the
//     ServiceAccount token included) are written in the kubelet's atomic
//     layout (atomicwriter.go) and refreshed every sync period while the
//     pod runs (refresh.go: RefreshLoop), each ConfigMap and Secret read
//     once per pass (objectreads.go);
//   - persistentVolumeClaim volumes are the bound volume's local or
//     hostPath directory (pvc.go);
//   - fsGroup and fsGroupChangePolicy are applied to the volumes the
//     kubelet would give a group (fsgroup.go).
//
// It may not start, stop or watch pods, write pod status or decide
// admission (the agent refuses pods; UnsupportedVolume and
// ServiceAccountVolume are its inputs): what it needs from the agent comes
// in Config. It imports no node agent package above it; podconfig is used
// for the downward API's field and resource values.
package volume
