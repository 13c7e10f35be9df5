package main

import (
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// goArchs are the Linux architectures Go builds a static binary for and
// registries know, as image platforms.
var goArchs = []string{"386", "amd64", "arm", "arm64", "loong64", "mips64le", "ppc64le", "riscv64", "s390x"}

// armVariants maps an arm image variant to GOARM.
var armVariants = map[string]string{"v5": "5", "v6": "6", "v7": "7"}

// parsePlatforms parses a comma-separated list of os/arch[/variant]: each
// must be linux on an architecture Go builds for, with a variant only for
// arm (v5, v6, v7; none means v7), and none may repeat.
func parsePlatforms(list string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		p, err := v1.ParsePlatform(s)
		if err != nil || s == "" {
			return nil, fmt.Errorf("platform %q: want os/arch[/variant], e.g. linux/amd64", s)
		}
		if p.OS != "linux" {
			return nil, fmt.Errorf("platform %q: only linux images can be built (the controller runs in a Linux pod)", s)
		}
		if !slices.Contains(goArchs, p.Architecture) {
			return nil, fmt.Errorf("platform %q: unknown architecture %q (known: %s)", s, p.Architecture, strings.Join(goArchs, ", "))
		}
		switch {
		case p.Architecture == "arm" && p.Variant == "":
			p.Variant = "v7"
		case p.Architecture == "arm" && armVariants[p.Variant] == "":
			return nil, fmt.Errorf("platform %q: unknown arm variant %q (known: v5, v6, v7)", s, p.Variant)
		case p.Architecture != "arm" && p.Variant != "":
			return nil, fmt.Errorf("platform %q: a variant is only known for arm", s)
		}
		if slices.ContainsFunc(out, func(o v1.Platform) bool { return o.Equals(*p) }) {
			return nil, fmt.Errorf("platform %q is given twice", s)
		}
		out = append(out, *p)
	}
	return out, nil
}

// goEnv is the environment that cross-compiles a static binary for p.
func goEnv(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
	if p.Architecture == "arm" {
		env = append(env, "GOARM="+armVariants[p.Variant])
	}
	return env
}
