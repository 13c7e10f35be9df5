// Command standins writes the offline stand-ins for the images of the
// upstream e2e specs jobkeeper runs ([sig-apps] Job, TTLAfterFinished and
// CronJob; [sig-node] Security Context and hostname override) into one
// `docker save` tarball, under
// the names the specs use, for `jobkeeper image load` (test/conformance/run.sh
// does both):
//
//	go run ./internal/testimages/cmd/standins -o /tmp/standins.tar [--busybox /bin/busybox] [--pause PATH] [--nnp PATH] [--agnhost PATH [--agnhost-porter DIR]] [--host-tools]
//
// busybox comes from a static busybox binary (Debian's busybox-static,
// /bin/busybox by default); pause and nnp are jobkeeper's own programs,
// built with the go command from the current directory (inside jobkeeper's
// module) unless --pause or --nnp names a built one; agnhost is written
// only with --agnhost, upstream's agnhost built static. --host-tools puts
// this machine's curl, netcat, dig and bash into the agnhost stand-in, as
// upstream's holds alpine's, and its dnsutils into glibc-dns-testing. It
// prints one line
// per image written, tab-separated: name, image ID (the config's digest,
// which `jobkeeper image ls` shows too), platform, what it was built from.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

func main() {
	out := flag.String("o", "", "the tarball to write (required)")
	busybox := flag.String("busybox", testimages.DefaultBusybox, "a statically linked busybox binary (Debian: apt-get install busybox-static)")
	pause := flag.String("pause", "", "a static pause program (default: build internal/testimages/pause)")
	nnp := flag.String("nnp", "", "a static nnp program (default: build internal/testimages/nnp)")
	agnhost := flag.String("agnhost", "", "upstream's agnhost program, built static (default: no agnhost stand-in)")
	porter := flag.String("agnhost-porter", "", "upstream's test/images/agnhost/porter directory, whose localhost.crt and localhost.key go to the agnhost stand-in's root (default: none)")
	hostTools := flag.Bool("host-tools", false, "put this machine's curl, nc (netcat-openbsd), dig, nslookup, host (bind9-dnsutils) and bash, with their libraries, into the agnhost stand-in, as upstream's image has alpine's, and dnsutils into the glibc-dns-testing one")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: standins -o FILE [--busybox PATH] [--pause PATH] [--nnp PATH] [--agnhost PATH [--agnhost-porter DIR]] [--host-tools]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	src := testimages.Sources{Busybox: *busybox, Pause: *pause, NNP: *nnp, Agnhost: *agnhost, AgnhostPorterDir: *porter}
	if *hostTools {
		src.AgnhostTools = testimages.AgnhostToolsFromHost()
		src.GlibcDNSTools = testimages.GlibcDNSToolsFromHost()
	}
	if err := run(*out, src); err != nil {
		fmt.Fprintln(os.Stderr, "standins:", err)
		os.Exit(1)
	}
}

// run builds the stand-ins and writes them to out.
func run(out string, src testimages.Sources) error {
	var err error
	if src.Busybox, err = testimages.FindBusybox(src.Busybox); err != nil {
		return err
	}
	if src.Pause == "" || src.NNP == "" {
		dir, err := os.MkdirTemp("", "standins-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if src.Pause == "" {
			if src.Pause, err = testimages.BuildPause(dir); err != nil {
				return err
			}
		}
		if src.NNP == "" {
			if src.NNP, err = testimages.BuildNNP(dir); err != nil {
				return err
			}
		}
	}
	images, err := testimages.StandIns(src)
	if err != nil {
		return err
	}
	if err := testimages.WriteDockerArchive(out, images); err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		img := images[ref]
		id, err := img.ConfigName() // the image ID, whatever the manifest's format
		if err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\t%s/%s\t%s\n", ref, id, cf.OS, cf.Architecture, cf.Config.Labels[testimages.LabelSource])
	}
	return nil
}
