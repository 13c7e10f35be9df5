package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, goCompile); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "deploy/image: %v\n", err)
		}
		stop()
		os.Exit(2)
	}
}

// options are the command's flags.
type options struct {
	// output is the docker-save tarball to write ("" writes none).
	output string
	// tag names the image in the tarball.
	tag string
	// push is the reference to push to ("" pushes nowhere).
	push string
	// platforms is the comma-separated platform list.
	platforms string
	// version is stamped into the binary and the labels.
	version string
	// source is the project's address for the labels.
	source string
}

// run parses args, builds the image for each platform, writes the tarball
// and pushes, printing what it did on stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, compile compileFunc) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	chart, err := readChartImage(root)
	if err != nil {
		return err
	}
	var o options
	fs := flag.NewFlagSet("deploy/image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.output, "o", "", "Write the image as a docker save tarball to this `file` (one platform).")
	fs.StringVar(&o.tag, "tag", chart.Ref(), "The image's name in the tarball: the Helm chart's default image.")
	fs.StringVar(&o.push, "push", "", "Push the image to this `reference`, with the credentials of your Docker config (several platforms: an index).")
	fs.StringVar(&o.platforms, "platform", "linux/"+runtime.GOARCH, "Comma-separated `os/arch[/variant]` list to build for.")
	fs.StringVar(&o.version, "version", chart.AppVersion, "Version stamped into the binary and the org.opencontainers.image.version label: the chart's appVersion.")
	fs.StringVar(&o.source, "source", chart.Home, "The project's address, for the org.opencontainers.image.source label.")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./deploy/image (-o FILE [-tag REF] | -push REF) [-platform os/arch,...]\n\n"+
			"Builds jobkeeper's controller image without Docker (see deploy/image/doc.go).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	plan, err := planBuild(o)
	if err != nil {
		return err
	}
	// Claim the output before building, so that an unwritable one fails
	// at once; it is renamed into place only once whole.
	var out *pendingFile
	if o.output != "" {
		if out, err = createPending(o.output); err != nil {
			return err
		}
		defer out.abandon()
	}
	workDir, err := os.MkdirTemp("", "jobkeeper-image-")
	if err != nil {
		return fmt.Errorf("creating a work directory: %w", err)
	}
	defer os.RemoveAll(workDir)
	bo := buildOptions{root: root, version: o.version, source: o.source, revision: gitRevision(ctx, root), compile: compile}
	images := make([]v1.Image, len(plan.platforms))
	for i, p := range plan.platforms {
		fmt.Fprintf(stdout, "Building %s for %s\n", binaryPackage, p.String())
		if images[i], err = buildImage(ctx, bo, p, workDir); err != nil {
			return err
		}
	}
	if out != nil {
		if err := writeTarball(out, plan.tag, images[0]); err != nil {
			return err
		}
		id, _ := images[0].ConfigName()
		fmt.Fprintf(stdout, "Wrote %s: %s (%s, image ID %s)\n", o.output, plan.tag.String(), plan.platforms[0].String(), id)
	}
	if plan.push != nil {
		digest, err := push(ctx, plan.push, plan.platforms, images, authn.DefaultKeychain)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Pushed %s@%s\n", plan.push.Context().String(), digest)
	}
	return nil
}

// plan is the checked flags.
type plan struct {
	// tag names the image in the tarball.
	tag name.Tag
	// push is where to push, nil for nowhere.
	push name.Reference
	// platforms are the platforms to build for.
	platforms []v1.Platform
}

// planBuild checks the flags before anything is built or written.
func planBuild(o options) (plan, error) {
	var p plan
	if o.output == "" && o.push == "" {
		return p, errors.New("nothing to do: give -o FILE, -push REF, or both")
	}
	var err error
	if p.platforms, err = parsePlatforms(o.platforms); err != nil {
		return p, err
	}
	if o.output != "" && len(p.platforms) > 1 {
		return p, fmt.Errorf("a docker save tarball holds one platform per name, and -platform gives %d: give one with -o, or use -push for a multi-platform index", len(p.platforms))
	}
	if p.tag, err = name.NewTag(o.tag); err != nil {
		return p, fmt.Errorf("-tag %q: %w", o.tag, err)
	}
	if o.push != "" {
		if p.push, err = name.ParseReference(o.push); err != nil {
			return p, fmt.Errorf("-push %q: %w", o.push, err)
		}
	}
	if o.version == "" {
		return p, errors.New("-version must not be empty")
	}
	return p, nil
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not in jobkeeper's module: run from its source tree (go run ./deploy/image)")
	}
	return filepath.Dir(gomod), nil
}
