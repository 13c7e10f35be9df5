package main

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// binaryPath is where the binary sits in the image, and binaryPackage what
// is built.
const (
	binaryPath    = "/jobkeeper-controller"
	binaryPackage = "./cmd/jobkeeper-controller"
)

// versionVariable is the linker variable the version is stamped into.
const versionVariable = "jobkeeper.dev/jobkeeper/pkg/version.Version"

// OCI annotation keys the image's labels use.
const (
	labelTitle       = "org.opencontainers.image.title"
	labelDescription = "org.opencontainers.image.description"
	labelVersion     = "org.opencontainers.image.version"
	labelSource      = "org.opencontainers.image.source"
	labelRevision    = "org.opencontainers.image.revision"
	labelURL         = "org.opencontainers.image.url"
)

// buildOptions say what to build.
type buildOptions struct {
	// root is the module's root directory.
	root string
	// version is stamped into the binary and the labels.
	version string
	// source is the project's source address (labelSource, labelURL).
	source string
	// revision is the source revision built ("" when unknown).
	revision string
	// compile builds the binary for a platform into out.
	compile compileFunc
}

// compileFunc builds the static controller binary of the module at root
// for p, stamped with version, into the file out.
type compileFunc func(ctx context.Context, root string, p v1.Platform, version, out string) error

// goCompile is the compileFunc that runs the go command: static
// (CGO_ENABLED=0), trimmed paths, stripped, the version stamped as the
// Dockerfile did.
func goCompile(ctx context.Context, root string, p v1.Platform, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X "+versionVariable+"="+version,
		"-o", out, binaryPackage)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), goEnv(p)...)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s for %s: %w\n%s", binaryPackage, p.String(), err, strings.TrimSpace(string(output)))
	}
	return nil
}

// buildImage builds the image for p: the binary, compiled into workDir, on
// the base, with the config and labels.
func buildImage(ctx context.Context, o buildOptions, p v1.Platform, workDir string) (v1.Image, error) {
	bin := filepath.Join(workDir, "jobkeeper-controller-"+strings.ReplaceAll(p.String(), "/", "-"))
	if err := o.compile(ctx, o.root, p, o.version, bin); err != nil {
		return nil, err
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("reading the built binary: %w", err)
	}
	base, err := layerOf(baseEntries())
	if err != nil {
		return nil, fmt.Errorf("building the base layer: %w", err)
	}
	binary, err := layerOf([]entry{{name: strings.TrimPrefix(binaryPath, "/"), typ: tar.TypeReg, mode: 0o755, body: body}})
	if err != nil {
		return nil, fmt.Errorf("building the binary's layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, base, binary)
	if err != nil {
		return nil, fmt.Errorf("assembling the image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: epoch}
	for i := range cf.History {
		cf.History[i].Created = v1.Time{Time: epoch}
	}
	cf.Config = imageConfig(o)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image's config: %w", err)
	}
	return img, nil
}

// imageConfig is how the image runs: the binary as entrypoint with the
// default command "controller" (as `jobkeeper controller`), as the non-root
// user, the chart's ports exposed, and the OCI labels.
func imageConfig(o buildOptions) v1.Config {
	labels := map[string]string{
		labelTitle:       "jobkeeper-controller",
		labelDescription: "jobkeeper's Job and TTL-after-finished controllers (the lean jobkeeper controller)",
		labelVersion:     o.version,
	}
	if o.source != "" {
		labels[labelSource] = o.source
		labels[labelURL] = o.source
	}
	if o.revision != "" {
		labels[labelRevision] = o.revision
	}
	return v1.Config{
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"controller"},
		User:         fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
		WorkingDir:   nonrootHome,
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}},
		Labels:       labels,
	}
}

// gitRevision returns the commit checked out at root, "" when there is no
// git or no repository.
func gitRevision(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
