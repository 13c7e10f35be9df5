package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's user: distroless' nonroot, which the chart's securityContext
// (runAsNonRoot) and the Dockerfile's image ran as.
const (
	nonrootUID  = 65532
	nonrootName = "nonroot"
	nonrootHome = "/home/nonroot"
)

// epoch is the modification time of every file, so that the same inputs
// give the same layers, digests and image ID.
var epoch = time.Unix(0, 0).UTC()

// entry is one file, directory or symbolic link of a layer.
type entry struct {
	// name is the path in the image, without a leading slash.
	name string
	// typ is a tar type flag (tar.TypeReg, tar.TypeDir).
	typ byte
	// mode is the permission bits.
	mode int64
	// uid and gid own the entry.
	uid, gid int
	// body is a regular file's content.
	body []byte
}

// baseEntries are the files of the distroless-style base: the users and
// groups (no login shell: there is none), the resolver's configuration and
// the directories programs expect. Nothing executable: no shell, no
// package manager.
func baseEntries() []entry {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", nonrootName, nonrootUID, nonrootUID, nonrootName, nonrootHome)
	group := "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("%s:x:%d:\n", nonrootName, nonrootUID)
	return []entry{
		{name: "etc", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", typ: tar.TypeReg, mode: 0o644, body: []byte(group)},
		{name: "etc/nsswitch.conf", typ: tar.TypeReg, mode: 0o644, body: []byte("hosts: files dns\n")},
		{name: "home", typ: tar.TypeDir, mode: 0o755},
		{name: "home/nonroot", typ: tar.TypeDir, mode: 0o700, uid: nonrootUID, gid: nonrootUID},
		{name: "root", typ: tar.TypeDir, mode: 0o700},
		{name: "tmp", typ: tar.TypeDir, mode: 0o1777},
	}
}

// layerOf is an uncompressed tar of entries as a layer (gzip-compressed
// when written), every entry dated epoch.
func layerOf(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
