// Package images is the node agent's image store: OCI and Docker images
// pulled from registries or loaded from archives, each layer unpacked once
// into a content-addressed directory that can serve as an overlayfs lower
// layer.
//
// # Layout
//
// A store is one directory (jobkeeper uses <data-dir>/images):
//
//	lock         flock(2) taken while the index is written and temp dirs are made or cleaned
//	index.json   the images (names, digests, layers, config), replaced atomically
//	l/<id>/fs    an unpacked layer; <id> is the first 16 hex digits of its diffID,
//	             l/<id>/meta.json holds the full one and the layer's size
//	             (a collision is an error, never a reuse)
//	use/<id>     a file each running container holds a shared flock on (Store.Use)
//	tmp/w-*      one work directory per open Store, with w-*.lock flocked while it is open
//
// Several processes may use a store at once (the agent of jobkeeper up and
// the jobkeeper image command). Data is written under tmp/ and renamed into
// place; the index is written to a temp file and renamed, under the lock.
// A process killed at any instant therefore leaves at worst a work
// directory, which the next Open removes once its lock is free, or an
// unpacked layer no image names yet, which the next pull of that layer
// reuses and which CollectGarbage or Remove deletes once it is an hour
// old (younger, it may be another process's pull in progress). A pull
// that fills the disk removes what it stored and fails with ENOSPC.
//
// # Pulling
//
// Concurrent pulls of one reference, platform and set of credentials (a
// digest of what the keychain gives for the repository) are one pull,
// which runs on until its result is in or the last caller waiting for it
// leaves; then it is cancelled. Pulls with other credentials are never
// shared: a pull with valid credentials cannot take the refusal of one
// without. Every registry request is watched: one that receives no byte
// for the progress timeout (PullOptions.ProgressTimeout, by default
// DefaultProgressTimeout, 5 minutes, as containerd's
// image_pull_progress_timeout), waiting for its answer or for the next
// bytes of a manifest or blob, fails the pull with ErrNoProgress ("no
// progress for 5m0s pulling layer sha256:… of REF"), keeping nothing
// partial.
//
// # Unpacking
//
// Whiteouts are stored as overlayfs expects them: a ".wh.name" entry becomes
// a 0/0 character device "name" (kernels since 5.8 let unprivileged users
// create one), ".wh..wh..opq" sets trusted.overlay.opaque=y (as root) and
// user.overlay.opaque=y (for rootless mounts with userxattr) on its
// directory. Run as root, files keep the owner, group and mode of the tar
// entry. Run as another user, ownership is flattened: every file belongs to
// that user, who is root inside the agent's user namespace, and directories
// keep their owner's write and search bits. Character and block device
// entries are skipped (the sandbox provides /dev). Entries with absolute or
// ".." paths, and hard links that leave the layer, are refused. A
// directory's mode, xattrs and times are applied once the whole layer is
// in, through a descriptor opened without following symbolic links, and
// only to the directory made for the entry: when a later entry replaced it
// or a parent (with a symbolic link out of the layer, say), they are
// dropped. A directory listed twice takes its last entry's.
package images
