//go:build !cgo || !linux

package sandbox

// canEnterUserNamespace says that this build, without cgo, cannot enter an
// exec'd command's stage into the container's user namespace: it gets one
// of its own with the same mapping (userns.go).
const canEnterUserNamespace = false
