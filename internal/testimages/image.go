package testimages

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultPath is the PATH of the images built here when their Config sets
// none: the one Docker gives an image built FROM scratch, which upstream's
// busybox image carries.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is how an image says it is run: the fields of the OCI image
// config's "config" object that a container runtime reads, plus the platform.
type Config struct {
	// Entrypoint and Cmd are the image's default command: a container's
	// command replaces Entrypoint (and drops Cmd), its args replace Cmd.
	Entrypoint, Cmd []string
	// Env is KEY=VALUE pairs; PATH=DefaultPath is added when no PATH is set.
	Env []string
	// WorkingDir is the default working directory ("" is /).
	WorkingDir string
	// User is the default user, "uid", "uid:gid" or a name ("" is root).
	User string
	// Labels are the image's labels.
	Labels map[string]string
	// OS and Architecture are the image's platform (default linux and the
	// GOARCH of the running program).
	OS, Architecture string
}

// Build is an OCI image of layers (bottom first) under cfg.
func Build(cfg Config, layers ...v1.Layer) (v1.Image, error) {
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("appending the layers: %w", err)
	}
	return withConfig(img, cfg)
}

// WithConfig is img (its layers) under cfg instead of its own config: e.g.
// the busybox stand-in with an Entrypoint.
func WithConfig(img v1.Image, cfg Config) (v1.Image, error) {
	return withConfig(img, cfg)
}

// withConfig sets img's config file to cfg, keeping its layers' diff IDs.
func withConfig(img v1.Image, cfg Config) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = cfg.OS, cfg.Architecture
	if cf.OS == "" {
		cf.OS = "linux"
	}
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	env := slices.Clone(cfg.Env)
	if !slices.ContainsFunc(env, func(kv string) bool { return len(kv) >= 5 && kv[:5] == "PATH=" }) {
		env = append([]string{"PATH=" + DefaultPath}, env...)
	}
	cf.Config = v1.Config{
		Entrypoint: slices.Clone(cfg.Entrypoint),
		Cmd:        slices.Clone(cfg.Cmd),
		Env:        env,
		WorkingDir: cfg.WorkingDir,
		User:       cfg.User,
		Labels:     cfg.Labels,
	}
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return out, nil
}

// Static is a one-layer image holding files (path inside the image to
// content, each an executable 0755 file, e.g. a static binary) whose
// Entrypoint is entrypoint (none if empty: then the container must say its
// command).
func Static(files map[string][]byte, entrypoint ...string) (v1.Image, error) {
	entries := make([]File, 0, len(files))
	for p, data := range files {
		entries = append(entries, Regular(p, 0o755, data))
	}
	layer, err := Layer(entries...)
	if err != nil {
		return nil, err
	}
	return Build(Config{Entrypoint: entrypoint}, layer)
}

// WithLayer is img with one more layer on top holding files; its config is
// img's.
func WithLayer(img v1.Image, files ...File) (v1.Image, error) {
	layer, err := Layer(files...)
	if err != nil {
		return nil, err
	}
	out, err := mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("appending a layer: %w", err)
	}
	return out, nil
}

// WithWhiteout is img with one more layer on top deleting paths (files or
// directories of the layers below) with OCI whiteout entries.
func WithWhiteout(img v1.Image, paths ...string) (v1.Image, error) {
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		files = append(files, Whiteout(p))
	}
	return WithLayer(img, files...)
}
