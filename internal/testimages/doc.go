// Package testimages builds small OCI images in memory, without a registry or
// a container engine, for jobkeeper's tests and for the conformance script.
//
// An image is a go-containerregistry v1.Image: a list of layers, each a tar of
// File entries (Layer), under a config (Config: Entrypoint, Cmd, Env, ...).
// On top of that:
//
//   - Busybox and Pause build offline stand-ins for the images upstream's
//     e2e specs run (registry.k8s.io/e2e-test-images/busybox and
//     registry.k8s.io/pause), from Debian's static busybox and from a pause
//     program of our own (package pause, built by BuildPause); StandIns names
//     them as the e2e specs do, and cmd/standins writes them into a docker-save
//     tarball for `jobkeeper image load`.
//   - Static, WithLayer and WithWhiteout build the images tests of the image
//     store and of pulls need: a static binary in one layer, a layer deleting
//     a path of a lower one.
//   - WriteDockerArchive writes images into a docker-save tarball, and
//     NewRegistry serves them from an in-process registry on 127.0.0.1, so
//     that tests exercise the same code paths as a real `image load` or pull.
//
// Nothing here touches the network beyond the loopback registry, and every
// image is deterministic: the same inputs give the same digests (file times
// and the config's creation time are the Unix epoch).
package testimages
