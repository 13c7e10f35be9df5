// Package cli holds the commands and flags shared by jobkeeper's two
// binaries: cmd/jobkeeper (the local tool, with `up`) and the lean
// cmd/jobkeeper-controller (what the image and the Helm chart run), which
// links no apiserver, etcd or node agent.
package cli
