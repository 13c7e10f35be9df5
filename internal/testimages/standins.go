package testimages

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images upstream's [sig-apps] Job, TTLAfterFinished and CronJob e2e
// specs of Kubernetes v1.36.3 run, named as test/utils/image/manifest.go
// names them: busybox (the Job fixtures' and CronJob's default image, and
// the framework's default test image) and pause (the fixtures'
// "notTerminate" pods).
const (
	BusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	PauseImage   = "registry.k8s.io/pause:3.10.2"
)

// StandIns are offline stand-ins for the images of upstream's e2e specs,
// under the names the specs use: Busybox(busyboxPath) as BusyboxImage and
// Pause(pausePath) as PauseImage. docs/conformance.md says how they differ
// from upstream's.
func StandIns(busyboxPath, pausePath string) (map[string]v1.Image, error) {
	busybox, err := Busybox(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("the busybox stand-in: %w", err)
	}
	pause, err := Pause(pausePath)
	if err != nil {
		return nil, fmt.Errorf("the pause stand-in: %w", err)
	}
	return map[string]v1.Image{BusyboxImage: busybox, PauseImage: pause}, nil
}
