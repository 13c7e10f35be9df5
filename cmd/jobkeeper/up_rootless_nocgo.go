//go:build !cgo || !linux

package main

// rootlessNodeSupported is false without cgo: nothing would clear the
// rootless node's ambient capabilities before the Go runtime starts, so
// every program up starts would inherit them (up_rootless_cgo.go).
const rootlessNodeSupported = false
