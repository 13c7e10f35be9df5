package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// lookupUser resolves u in the view's /etc/passwd and /etc/group (either
// may be missing) and returns the credential the container's processes
// take and the user's home directory. The error says why the identity
// cannot be had: a name the image does not know, or an id the sandbox's
// user namespace (ns, read before the view was built: the view's /proc may
// be a container's) does not map.
func lookupUser(u User, ns namespaceIDs) (*syscall.Credential, identity, error) {
	passwd, err := readEntries("/etc/passwd", parsePasswd)
	if err != nil {
		return nil, identity{}, err
	}
	group, err := readEntries("/etc/group", parseGroup)
	if err != nil {
		return nil, identity{}, err
	}
	id, err := resolveUser(u, passwd, group)
	if err != nil {
		return nil, identity{}, err
	}
	cred, err := credentialFor(id, ns)
	if err != nil {
		return nil, identity{}, err
	}
	return cred, id, nil
}

// readEntries parses the image's file at p with parse; a missing file has
// no entries. The file is read with readImageFile.
func readEntries[E any](p string, parse func(io.Reader) []E) ([]E, error) {
	b, err := readImageFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parse(bytes.NewReader(b)), nil
}

// maxImageFile bounds what the sandbox reads of a file of the image.
const maxImageFile = 1 << 20

// readImageFile reads a small file of the image (p is a path in the view,
// after the pivot, so symbolic links resolve inside the image) without
// trusting what the image put there: anything but a regular file (a FIFO
// that would block the open for ever, a device, a directory) is refused
// before it is opened and again after, and a file larger than
// maxImageFile is refused. The error for a missing file wraps
// os.ErrNotExist.
func readImageFile(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("reading the image's %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s of the image is not a regular file (%s)", p, fileType(st.Mode()))
	}
	// O_NONBLOCK: should the file have been replaced by a FIFO since, the
	// open does not wait for a writer; the check below refuses it.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the image's %s: %w", p, err)
	}
	defer func() { _ = f.Close() }()
	if st, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("reading the image's %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s of the image is not a regular file (%s)", p, fileType(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading the image's %s: %w", p, err)
	}
	if len(b) > maxImageFile {
		return nil, fmt.Errorf("%s of the image is larger than 1 MiB", p)
	}
	return b, nil
}

// fileType names the type of a file that is not a regular one.
func fileType(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "type " + m.Type().String()
}

// identity is who a container's processes run as.
type identity struct {
	// uid and gid are the user and primary group.
	uid, gid uint32
	// implied are the groups the image's /etc/group lists the user in;
	// the primary group comes first.
	implied []uint32
	// extra are the groups the pod asked for (supplementalGroups).
	extra []uint32
	// home is the user's home directory, "/" when the image does not
	// know the user.
	home string
}

// report is id as the sandbox reports it to the agent.
func (id identity) report() *Identity {
	return &Identity{UID: id.uid, GID: id.gid, Groups: id.groups()}
}

// groups are all supplementary groups of id, without duplicates.
func (id identity) groups() []uint32 {
	var out []uint32
	for _, g := range append(slices.Clone(id.implied), id.extra...) {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// passwdEntry is one line of /etc/passwd.
type passwdEntry struct {
	// name, uid, gid and home are the line's fields of those names.
	name     string
	uid, gid uint32
	home     string
}

// groupEntry is one line of /etc/group.
type groupEntry struct {
	// name and gid are the group's.
	name string
	gid  uint32
	// members are the user names listed in it.
	members []string
}

// parsePasswd reads an /etc/passwd file; lines it cannot read are
// skipped, as libc skips them.
func parsePasswd(r io.Reader) []passwdEntry {
	var out []passwdEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 6 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := parseID(f[2])
		gid, err2 := parseID(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5]})
	}
	return out
}

// parseGroup reads an /etc/group file; lines it cannot read are skipped.
func parseGroup(r io.Reader) []groupEntry {
	var out []groupEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 3 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		gid, err := parseID(f[2])
		if err != nil {
			continue
		}
		g := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 {
			for _, m := range strings.Split(f[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					g.members = append(g.members, m)
				}
			}
		}
		out = append(out, g)
	}
	return out
}

// parseID parses a user or group id: 0 to 2^32-2 (2^32-1 is "no id").
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not a user or group id", s)
	}
	return uint32(n), nil
}

// checkID checks an id the pod gave (runAsUser, runAsGroup,
// supplementalGroups).
func checkID(what string, n int64) (uint32, error) {
	if n < 0 || n >= 1<<32-1 {
		return 0, fmt.Errorf("%s %d is not a valid id", what, n)
	}
	return uint32(n), nil
}

// resolveUser decides who the container's processes run as, as runc and
// containerd do with the image's /etc/passwd and /etc/group:
//   - the user is RunAsUser when set, else the user part of u.Image, else
//     uid 0. A name must be in passwd; a number need not be.
//   - the primary group is RunAsGroup when set, else the group part of
//     u.Image (when RunAsUser is not set), else the user's passwd entry's
//     group, else 0. A name must be in group; a number need not be.
//   - the supplementary groups are the primary group, the groups that list
//     the user by name (unless StrictGroups), and SupplementalGroups.
//   - HOME is the passwd entry's home, "/" when the user has none.
func resolveUser(u User, passwd []passwdEntry, group []groupEntry) (identity, error) {
	userPart, groupPart, hasGroup := strings.Cut(u.Image, ":")
	if u.RunAsUser != nil {
		userPart, groupPart, hasGroup = strconv.FormatInt(*u.RunAsUser, 10), "", false
	}
	if u.RunAsGroup != nil {
		groupPart, hasGroup = strconv.FormatInt(*u.RunAsGroup, 10), true
	}
	if hasGroup && groupPart == "" {
		return identity{}, fmt.Errorf("user %q names an empty group", u.Image)
	}
	id := identity{home: "/"}
	var entry *passwdEntry
	if userPart == "" {
		userPart = "0"
	}
	if n, err := strconv.ParseInt(userPart, 10, 64); err == nil {
		if id.uid, err = checkID("user", n); err != nil {
			return identity{}, err
		}
		for i := range passwd {
			if passwd[i].uid == id.uid {
				entry = &passwd[i]
				break
			}
		}
	} else {
		for i := range passwd {
			if passwd[i].name == userPart {
				entry = &passwd[i]
				break
			}
		}
		if entry == nil {
			return identity{}, fmt.Errorf("unable to find user %s: no matching entries in the image's /etc/passwd", userPart)
		}
		id.uid = entry.uid
	}
	if entry != nil {
		id.gid, id.home = entry.gid, entry.home
		if id.home == "" {
			id.home = "/"
		}
	}
	if hasGroup {
		if n, err := strconv.ParseInt(groupPart, 10, 64); err == nil {
			if id.gid, err = checkID("group", n); err != nil {
				return identity{}, err
			}
		} else {
			found := false
			for _, g := range group {
				if g.name == groupPart {
					id.gid, found = g.gid, true
					break
				}
			}
			if !found {
				return identity{}, fmt.Errorf("unable to find group %s: no matching entries in the image's /etc/group", groupPart)
			}
		}
	}
	id.implied = []uint32{id.gid}
	if entry != nil && !u.StrictGroups {
		for _, g := range group {
			if slices.Contains(g.members, entry.name) && !slices.Contains(id.implied, g.gid) {
				id.implied = append(id.implied, g.gid)
			}
		}
	}
	for _, n := range u.SupplementalGroups {
		g, err := checkID("supplemental group", n)
		if err != nil {
			return identity{}, err
		}
		id.extra = append(id.extra, g)
	}
	return id, nil
}

// withHome adds HOME=home to env unless it sets HOME already.
func withHome(env []string, home string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			return env
		}
	}
	return append(slices.Clip(env), "HOME="+home)
}
