// Command image builds jobkeeper's controller image without Docker, as ko
// does: the lean jobkeeper-controller binary, static (CGO_ENABLED=0,
// -trimpath), on a distroless-style base built here in Go (a non-root user
// in /etc/passwd, no shell, no package manager), with OCI labels naming
// the version and the source. It writes a `docker save` tarball, which
// `jobkeeper image load`, `docker load`, `kind load image-archive` and
// `crane push` accept, and pushes to a registry.
//
//	go run ./deploy/image -o jobkeeper-controller.tar
//	go run ./deploy/image -o FILE -tag REF -platform linux/arm64
//	go run ./deploy/image -push registry.example/jobkeeper/jobkeeper:v0.1.0 -platform linux/amd64,linux/arm64
//
// The default name is the one the Helm chart installs (values.yaml's
// image.repository and Chart.yaml's appVersion), and the version stamped
// into the binary is the chart's appVersion unless -version says
// otherwise. Building for another architecture needs nothing but Go.
//
// The image holds:
//
//	/jobkeeper-controller            the binary (entrypoint; default command "controller")
//	/etc/passwd, /etc/group          root, nobody and nonroot (uid and gid 65532), no login shell
//	/etc/nsswitch.conf               "hosts: files dns", for Go's resolver
//	/home/nonroot, /root, /tmp       the user's home (0700), root's (0700), /tmp (1777)
//
// and runs as 65532:65532, exposing 8080 (metrics) and 8081 (health
// probes), as the Dockerfile's image on distroless static:nonroot did.
package main
