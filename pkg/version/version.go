// Package version reports jobkeeper's own version and the Kubernetes release
// its embedded components come from.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is jobkeeper's version, set at link time with
// -ldflags "-X jobkeeper.dev/jobkeeper/pkg/version.Version=v1.2.3".
// Left empty, it is read from the module build information.
var Version = ""

// Info is the version report.
type Info struct {
	// Version is jobkeeper's version.
	Version string `json:"version"`
	// Commit is the VCS revision, when the build recorded one.
	Commit string `json:"commit,omitempty"`
	// Kubernetes is the k8s.io/kubernetes release linked in.
	Kubernetes string `json:"kubernetes"`
	// Go is the Go toolchain version.
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the version report of this binary.
func Get() Info {
	info := Info{Version: Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Kubernetes: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/kubernetes" {
				info.Kubernetes = d.Version
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "v0.0.0-dev"
	}
	return info
}

// String formats the report on one line.
func (i Info) String() string {
	s := fmt.Sprintf("jobkeeper %s (kubernetes %s, %s, %s)", i.Version, i.Kubernetes, i.Go, i.Platform)
	if i.Commit != "" {
		s += " commit " + i.Commit
	}
	return s
}
