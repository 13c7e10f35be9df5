package testimages

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images upstream's e2e specs of Kubernetes v1.36.3 that jobkeeper runs
// need, named as test/utils/image/manifest.go names them: busybox (the Job
// fixtures' and CronJob's default image, and the framework's default test
// image), pause (the fixtures' "notTerminate" pods), for the [sig-node]
// Security Context specs nonewprivs, nonroot and agnhost, and for the
// hostname override specs glibc-dns-testing.
const (
	BusyboxImage    = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	PauseImage      = "registry.k8s.io/pause:3.10.2"
	NonewprivsImage = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	NonRootImage    = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	AgnhostImage    = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// AgnhostPrevImage is the agnhost the [sig-apps] rolling update specs
	// update from (or to): the same stand-in.
	AgnhostPrevImage = "registry.k8s.io/e2e-test-images/agnhost:2.55"
	GlibcDNSImage    = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
	// NginxImage and NginxNewImage, nginx's alpine image, are pods' servers
	// in [sig-network] and [sig-apps] specs.
	NginxImage    = "registry.k8s.io/e2e-test-images/nginx:1.15-4"
	NginxNewImage = "registry.k8s.io/e2e-test-images/nginx:1.27-0"
)

// NNPPackage is the import path of the program BuildNNP builds.
const NNPPackage = "jobkeeper.dev/jobkeeper/internal/testimages/nnp"

// NonRootUser is the user upstream's nonroot image runs as (its Dockerfile's
// `USER 1234`).
const NonRootUser = "1234"

// AgnhostPackage is the import path of upstream's agnhost program, which
// Agnhost's binary must be built from (at the Kubernetes version of the
// specs).
const AgnhostPackage = "k8s.io/kubernetes/test/images/agnhost"

// BuildNNP builds the nnp program (package nnp) into dir as BuildPause
// builds pause, and returns its path.
func BuildNNP(dir string) (string, error) {
	return buildProgram(dir, "nnp", NNPPackage)
}

// Sources are the programs the stand-ins are built from.
type Sources struct {
	// Busybox is a static busybox (FindBusybox), required.
	Busybox string
	// Pause is the pause program (BuildPause), required.
	Pause string
	// NNP is the nnp program (BuildNNP), required.
	NNP string
	// Agnhost is upstream's agnhost program built static from
	// AgnhostPackage; empty leaves the agnhost stand-in out (building it
	// takes minutes and a module requiring k8s.io/kubernetes with its test
	// dependencies, which test/conformance/run.sh has).
	Agnhost string
	// AgnhostTools are the programs upstream's agnhost image adds from
	// alpine's packages (curl, netcat, dig...), copied from this machine
	// with their libraries (AgnhostToolsFromHost); none leaves busybox's
	// versions, which lack the options the [sig-network] specs use.
	AgnhostTools []HostProgram
	// AgnhostPorterDir is upstream's test/images/agnhost/porter source
	// directory, whose localhost.crt and localhost.key upstream's image
	// holds at its root for `agnhost porter`'s TLS ports; empty leaves
	// them out.
	AgnhostPorterDir string
	// GlibcDNSTools are the programs upstream's glibc-dns-testing image
	// (Debian with dnsutils) has and busybox has not, copied from this
	// machine (GlibcDNSToolsFromHost); none leaves the image without dig.
	GlibcDNSTools []HostProgram
}

// GlibcDNSToolsFromHost are dnsutils' dig, nslookup and host of this
// Debian machine (`apt-get install bind9-dnsutils`), where Debian puts
// them, libc-bin's getent, and its dash as /bin/sh (shellInPath),
// Debian's shell.
func GlibcDNSToolsFromHost() []HostProgram {
	return []HostProgram{
		shellInPath,
		{Source: "/usr/bin/dig", Path: "usr/bin/dig"},
		{Source: "/usr/bin/nslookup", Path: "usr/bin/nslookup"},
		{Source: "/usr/bin/host", Path: "usr/bin/host"},
		{Source: "/usr/bin/getent", Path: "usr/bin/getent"},
	}
}

// shellInPath replaces busybox's sh in an image given other tools: Debian's
// static busybox runs its own applets before the programs in PATH
// (FEATURE_SH_STANDALONE), so that its sh would run its own nc or nslookup
// instead of the tools; alpine's busybox sh, and Debian's dash, look in
// PATH as upstream's images do.
var shellInPath = HostProgram{Source: "/bin/dash", Path: "bin/sh"}

// AgnhostToolsFromHost are the programs of upstream's agnhost image (alpine
// with curl, netcat-openbsd, bind-tools and bash) at alpine's paths, from
// this Debian machine's curl, netcat-openbsd, bind9-dnsutils and bash
// packages (`apt-get install curl netcat-openbsd bind9-dnsutils`), its
// getent (alpine's musl has one, busybox has not), and its dash as /bin/sh
// (shellInPath).
func AgnhostToolsFromHost() []HostProgram {
	return []HostProgram{
		shellInPath,
		{Source: "/usr/bin/curl", Path: "usr/bin/curl"},
		{Source: "/bin/nc.openbsd", Path: "usr/bin/nc"},
		{Source: "/usr/bin/dig", Path: "usr/bin/dig"},
		{Source: "/usr/bin/nslookup", Path: "usr/bin/nslookup"},
		{Source: "/usr/bin/host", Path: "usr/bin/host"},
		{Source: "/usr/bin/getent", Path: "usr/bin/getent"},
		{Source: "/bin/bash", Path: "bin/bash"},
	}
}

// StandIns are offline stand-ins for the images of upstream's e2e specs,
// under the names the specs use. docs/conformance.md says how each differs
// from upstream's.
func StandIns(src Sources) (map[string]v1.Image, error) {
	busybox, err := Busybox(src.Busybox)
	if err != nil {
		return nil, fmt.Errorf("the busybox stand-in: %w", err)
	}
	pause, err := Pause(src.Pause)
	if err != nil {
		return nil, fmt.Errorf("the pause stand-in: %w", err)
	}
	nnp, err := Nonewprivs(busybox, src.NNP)
	if err != nil {
		return nil, fmt.Errorf("the nonewprivs stand-in: %w", err)
	}
	nonRoot, err := NonRoot(busybox)
	if err != nil {
		return nil, fmt.Errorf("the nonroot stand-in: %w", err)
	}
	glibcDNS, err := GlibcDNS(busybox, src.GlibcDNSTools...)
	if err != nil {
		return nil, fmt.Errorf("the glibc-dns-testing stand-in: %w", err)
	}
	nginx, err := Nginx(busybox)
	if err != nil {
		return nil, fmt.Errorf("the nginx stand-in: %w", err)
	}
	images := map[string]v1.Image{BusyboxImage: busybox, PauseImage: pause, NonewprivsImage: nnp, NonRootImage: nonRoot, GlibcDNSImage: glibcDNS,
		NginxImage: nginx, NginxNewImage: nginx}
	if src.Agnhost != "" {
		agnhost, err := Agnhost(busybox, src.Agnhost, src.AgnhostPorterDir, src.AgnhostTools...)
		if err != nil {
			return nil, fmt.Errorf("the agnhost stand-in: %w", err)
		}
		images[AgnhostImage], images[AgnhostPrevImage] = agnhost, agnhost
	}
	return images, nil
}

// Nonewprivs is a stand-in for upstream's nonewprivs image (alpine with
// /usr/local/bin/nnp set-user-ID root, Cmd ["nnp"]): the busybox stand-in
// with the nnp program (BuildNNP) at the same path, mode 04755, owned by
// root.
func Nonewprivs(busybox v1.Image, nnpPath string) (v1.Image, error) {
	binary, err := readStatic(nnpPath)
	if err != nil {
		return nil, fmt.Errorf("the nnp program: %w", err)
	}
	img, err := WithLayer(busybox,
		Dir("usr/local", 0o755), Dir("usr/local/bin", 0o755),
		Regular("usr/local/bin/nnp", fs.ModeSetuid|0o755, binary))
	if err != nil {
		return nil, err
	}
	return withStandInConfig(img, NonewprivsImage, NNPPackage, Config{Cmd: []string{"nnp"}})
}

// NonRoot is a stand-in for upstream's nonroot image (debian-base with
// `USER 1234`): the busybox stand-in running as NonRootUser.
func NonRoot(busybox v1.Image) (v1.Image, error) {
	return withStandInConfig(busybox, NonRootImage, "busybox stand-in", Config{Cmd: []string{"sh"}, User: NonRootUser})
}

// GlibcDNS is a stand-in for upstream's glibc-dns-testing image (Debian
// with dnsutils and coredns 1.5.0, which the hostname specs run `hostname`
// and `hostname -f` in): the busybox stand-in. busybox's `hostname -f`
// looks the hostname up as Debian's does, in /etc/hosts (the pod's
// managed one) before DNS, and fails likewise when nothing knows it. tools
// (dnsutils' dig, nslookup and host: GlibcDNSToolsFromHost) go in a layer
// of their own; coredns is not there.
func GlibcDNS(busybox v1.Image, tools ...HostProgram) (v1.Image, error) {
	img, source := busybox, "busybox stand-in"
	if len(tools) > 0 {
		var err error
		if img, err = withTools(busybox, tools); err != nil {
			return nil, fmt.Errorf("the glibc-dns-testing image's tools: %w", err)
		}
		source = "busybox stand-in with this machine's dnsutils"
	}
	return withStandInConfig(img, GlibcDNSImage, source, Config{Cmd: []string{"sh"}})
}

// Agnhost is a stand-in for upstream's agnhost image: the busybox stand-in
// with upstream's own agnhost program at /agnhost (and /agnhost-2 linking to
// it), /uploads, and the account the image's Dockerfile adds
// (user-defined-in-image, uid and gid 1000, also a member of
// group-defined-in-image, gid 50000); Entrypoint ["/agnhost"], Cmd
// ["pause"], and porterDir's localhost.crt and localhost.key at the root
// when given. Upstream's image is alpine with curl, netcat, iproute2, iperf,
// bind-tools, bash and coredns added, and a registry's files for the image
// pull specs; the stand-in has tools (HostPrograms, in a layer of their own)
// in their place, busybox's versions of those not given, and neither
// coredns nor the registry.
func Agnhost(busybox v1.Image, agnhostPath, porterDir string, tools ...HostProgram) (v1.Image, error) {
	binary, err := readStatic(agnhostPath)
	if err != nil {
		return nil, fmt.Errorf("the agnhost program: %w", err)
	}
	var certs []File
	if porterDir != "" {
		for _, name := range []string{"localhost.crt", "localhost.key"} {
			b, err := os.ReadFile(filepath.Join(porterDir, name))
			if err != nil {
				return nil, fmt.Errorf("agnhost porter's certificate: %w", err)
			}
			certs = append(certs, Regular(name, 0o644, b))
		}
	}
	if len(tools) > 0 {
		if busybox, err = withTools(busybox, tools); err != nil {
			return nil, fmt.Errorf("the agnhost image's tools: %w", err)
		}
	}
	const user, group = "user-defined-in-image", "group-defined-in-image"
	img, err := WithLayer(busybox, append([]File{
		Regular("agnhost", 0o755, binary),
		Symlink("agnhost-2", "agnhost"),
		Dir("uploads", 0o755),
		File{Path: "home/" + user, Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
		Regular("etc/passwd", 0o644, []byte(
			"root:x:0:0:root:/root:/bin/sh\n"+
				"nobody:x:65534:65534:nobody:/home:/bin/false\n"+
				user+":x:1000:1000::/home/"+user+":/bin/sh\n")),
		Regular("etc/group", 0o644, []byte(
			"root:x:0:\n"+
				"nobody:x:65534:\n"+
				user+":x:1000:\n"+
				group+":x:50000:"+user+"\n")),
	}, certs...)...)
	if err != nil {
		return nil, err
	}
	return withStandInConfig(img, AgnhostImage, AgnhostPackage,
		Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}})
}

// NginxCmd is the nginx stand-in's command.
var NginxCmd = []string{"sh", "-c", "trap 'exit 0' TERM QUIT INT; httpd -f -p 80 -h /usr/share/nginx/html & wait"}

// nginxIndex is the page nginx's image serves at /.
const nginxIndex = "<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n</head>\n<body>\n<h1>Welcome to nginx!</h1>\n</body>\n</html>\n"

// Nginx is a stand-in for upstream's nginx images (nginx's alpine image,
// serving /usr/share/nginx/html on port 80): the busybox stand-in running
// busybox's httpd in the foreground on port 80 from the same directory,
// which holds a "Welcome to nginx!" index.html, under a shell that ends
// on SIGTERM, SIGQUIT or SIGINT as nginx does (httpd as PID 1 would
// ignore them and take the whole grace period).
func Nginx(busybox v1.Image) (v1.Image, error) {
	img, err := WithLayer(busybox,
		Dir("usr/share/nginx/html", 0o755),
		Regular("usr/share/nginx/html/index.html", 0o644, []byte(nginxIndex)))
	if err != nil {
		return nil, err
	}
	return withStandInConfig(img, NginxImage, "busybox httpd stand-in",
		Config{Cmd: NginxCmd})
}

// withTools is img with a layer holding tools (HostPrograms) and an
// /etc/nsswitch.conf looking names up in /etc/hosts before DNS, as
// Debian's and alpine's do: without one, glibc's getent and curl would
// ask DNS first, and stop at its NXDOMAIN for a pod's own hostname.
func withTools(img v1.Image, tools []HostProgram) (v1.Image, error) {
	files, err := HostPrograms(tools...)
	if err != nil {
		return nil, err
	}
	files = append(files, Regular("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n")))
	return WithLayer(img, files...)
}

// withStandInConfig is img under cfg, labelled as the stand-in for name
// built from source, with img's architecture.
func withStandInConfig(img v1.Image, name, source string, cfg Config) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg.Architecture = cf.Architecture
	cfg.Labels = map[string]string{LabelStandInFor: name, LabelSource: source}
	return WithConfig(img, cfg)
}

// readStatic reads a statically linked executable of this machine's
// architecture.
func readStatic(p string) ([]byte, error) {
	if _, err := staticArch(p); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}
