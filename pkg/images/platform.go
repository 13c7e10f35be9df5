package images

import (
	"runtime"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// nodePlatform is the platform of this process: runtime.GOOS/GOARCH, with
// the variant where images tell variants apart.
func nodePlatform() *v1.Platform {
	p := &v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	switch runtime.GOARCH {
	case "arm64":
		p.Variant = "v8"
	case "arm":
		p.Variant = "v7"
	}
	return p
}

// platformString writes p as "os/arch[/variant]".
func platformString(p *v1.Platform) string {
	if p == nil {
		return ""
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// platformMatches says whether an image for got runs on want: same OS and
// architecture, and the same variant when both name one (arm64's images
// often leave out their only variant, v8).
func platformMatches(want, got *v1.Platform) bool {
	if got == nil {
		return false
	}
	if got.OS != want.OS || got.Architecture != want.Architecture {
		return false
	}
	return want.Variant == "" || got.Variant == "" || got.Variant == want.Variant
}

// choosePlatform picks from an index's manifests the first image for want.
// If none fits it returns the platforms the index has, sorted.
func choosePlatform(want *v1.Platform, manifests []v1.Descriptor) (*v1.Descriptor, []string) {
	var has []string
	for i := range manifests {
		m := &manifests[i]
		if !m.MediaType.IsImage() {
			continue
		}
		if platformMatches(want, m.Platform) {
			return m, nil
		}
		if ps := platformString(m.Platform); ps != "" && !strings.HasPrefix(ps, "unknown/") && !contains(has, ps) {
			has = append(has, ps)
		}
	}
	sort.Strings(has)
	return nil, has
}
