// Package view builds a container's filesystem view, the part of a
// sandbox that a container runtime's rootfs and mount setup does: a pure
// plan of the steps (plan.go: the image's overlay or the host-mode
// overlays, the container's /dev, /proc and /sys with their masked and
// read-only paths, the hidden directories, the read-only root, the
// volumes), the steps carried out in the sandbox's own mount namespace
// (setup_linux.go), the volumes mounted by handle (handles_linux.go), the
// idmapped mounts of a container with a user namespace of its own
// (idmap_linux.go), and the pivot into the view.
//
// It owns what is mounted and where; it may not start processes, and it
// knows nothing of the sandbox's protocol or of pods: package sandbox
// fills a Spec from its Config, calls SetUp, and mounts the container's
// /proc through the callback SetUp is given (only a process of the
// container's PID namespace can).
package view
