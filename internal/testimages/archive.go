package testimages

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteDockerArchive writes images (by tag, e.g.
// "registry.k8s.io/pause:3.10.2") into the file at path as a `docker save`
// tarball (manifest.json with RepoTags, configs and layers), the format
// `jobkeeper image load` and `docker load` read. An image under two tags is
// written once.
func WriteDockerArchive(path string, images map[string]v1.Image) error {
	refs := make(map[name.Reference]v1.Image, len(images))
	for ref, img := range images {
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("image name %q: %w", ref, err)
		}
		refs[tag] = img
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	return nil
}
