package testimages

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PausePackage is the import path of the pause program BuildPause builds.
const PausePackage = "jobkeeper.dev/jobkeeper/internal/testimages/pause"

// PauseUser is the user registry.k8s.io/pause runs as (its Dockerfile's
// `USER 65535:65535`), which Pause's image says too.
const PauseUser = "65535:65535"

// BuildPause builds the pause program (package pause) into dir, statically
// linked (CGO_ENABLED=0, stripped), with the go command of PATH from the
// current directory, which must be inside jobkeeper's module (as a test's
// is), and returns its path. Tests call it once per test binary, e.g. in
// TestMain with a temporary directory.
func BuildPause(dir string) (string, error) {
	return buildProgram(dir, "pause", PausePackage)
}

// buildProgram builds the main package pkg of jobkeeper's module into
// dir/name as BuildPause says, and returns its path.
func buildProgram(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the %s program (%s): %w\n%s", name, cmd, err, msg)
	}
	return out, nil
}

// Pause is a one-layer stand-in for registry.k8s.io/pause: /pause (the
// static program at pausePath, as BuildPause builds it), Entrypoint
// ["/pause"], running as PauseUser as the real one does.
func Pause(pausePath string) (v1.Image, error) {
	arch, err := staticArch(pausePath)
	if err != nil {
		return nil, fmt.Errorf("the pause program: %w", err)
	}
	binary, err := os.ReadFile(pausePath)
	if err != nil {
		return nil, fmt.Errorf("reading the pause program: %w", err)
	}
	layer, err := Layer(Regular("pause", 0o755, binary))
	if err != nil {
		return nil, fmt.Errorf("building the pause layer: %w", err)
	}
	return Build(Config{
		Entrypoint:   []string{"/pause"},
		User:         PauseUser,
		Architecture: arch,
		Labels: map[string]string{
			LabelStandInFor: PauseImage,
			LabelSource:     PausePackage,
		},
	}, layer)
}
