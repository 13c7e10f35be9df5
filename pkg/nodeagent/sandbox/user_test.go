package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

const testPasswd = `# comment
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
app:x:1000:1000:app:/home/app:/bin/sh
nohome:x:1001:1001:::/bin/sh
broken:x:notanumber:0::/:
short:x:5
`

const testGroup = `root:x:0:
daemon:x:1:app
app:x:1000:
staff:x:50:app, other
wheel:x:10:root
bad:x:-1:app
`

func TestResolveUser(t *testing.T) {
	passwd := parsePasswd(strings.NewReader(testPasswd))
	group := parseGroup(strings.NewReader(testGroup))
	id := func(v int64) *int64 { return &v }
	for name, tc := range map[string]struct {
		user    User
		want    identity
		wantErr string
	}{
		"empty is root":          {user: User{}, want: identity{uid: 0, gid: 0, implied: []uint32{0, 10}, home: "/root"}},
		"name":                   {user: User{Image: "app"}, want: identity{uid: 1000, gid: 1000, implied: []uint32{1000, 1, 50}, home: "/home/app"}},
		"uid in passwd":          {user: User{Image: "1000"}, want: identity{uid: 1000, gid: 1000, implied: []uint32{1000, 1, 50}, home: "/home/app"}},
		"uid not in passwd":      {user: User{Image: "4242"}, want: identity{uid: 4242, gid: 0, implied: []uint32{0}, home: "/"}},
		"uid:gid":                {user: User{Image: "4242:4343"}, want: identity{uid: 4242, gid: 4343, implied: []uint32{4343}, home: "/"}},
		"name:group name":        {user: User{Image: "app:staff"}, want: identity{uid: 1000, gid: 50, implied: []uint32{50, 1}, home: "/home/app"}},
		"name:gid":               {user: User{Image: "app:7"}, want: identity{uid: 1000, gid: 7, implied: []uint32{7, 1, 50}, home: "/home/app"}},
		"empty home is /":        {user: User{Image: "nohome"}, want: identity{uid: 1001, gid: 1001, implied: []uint32{1001}, home: "/"}},
		"runAsUser replaces all": {user: User{Image: "app:staff", RunAsUser: id(0)}, want: identity{uid: 0, gid: 0, implied: []uint32{0, 10}, home: "/root"}},
		"runAsGroup replaces the group": {
			user: User{Image: "app", RunAsGroup: id(99)}, want: identity{uid: 1000, gid: 99, implied: []uint32{99, 1, 50}, home: "/home/app"},
		},
		"runAsUser and runAsGroup and supplemental groups": {
			user: User{Image: "app", RunAsUser: id(5), RunAsGroup: id(6), SupplementalGroups: []int64{6, 7}},
			want: identity{uid: 5, gid: 6, implied: []uint32{6}, extra: []uint32{6, 7}, home: "/"},
		},
		"strict leaves the image's groups out": {
			user: User{Image: "app", SupplementalGroups: []int64{7}, StrictGroups: true},
			want: identity{uid: 1000, gid: 1000, implied: []uint32{1000}, extra: []uint32{7}, home: "/home/app"},
		},
		"unknown name":          {user: User{Image: "nobody"}, wantErr: "unable to find user nobody"},
		"unknown group":         {user: User{Image: "app:nogroup"}, wantErr: "unable to find group nogroup"},
		"empty group":           {user: User{Image: "app:"}, wantErr: "empty group"},
		"negative runAsUser":    {user: User{RunAsUser: id(-1)}, wantErr: "not a valid id"},
		"uid too large":         {user: User{Image: "4294967295"}, wantErr: "not a valid id"},
		"bad supplemental":      {user: User{SupplementalGroups: []int64{1 << 32}}, wantErr: "not a valid id"},
		"no files, numeric ids": {user: User{Image: "3:4"}, want: identity{uid: 3, gid: 4, implied: []uint32{4}, home: "/"}},
	} {
		t.Run(name, func(t *testing.T) {
			p, g := passwd, group
			if name == "no files, numeric ids" {
				p, g = nil, nil
			}
			got, err := resolveUser(tc.user, p, g)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(identity{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithHome(t *testing.T) {
	if got := withHome([]string{"A=1"}, "/root"); !cmp.Equal(got, []string{"A=1", "HOME=/root"}) {
		t.Errorf("added: %q", got)
	}
	if got := withHome([]string{"HOME=/x"}, "/root"); !cmp.Equal(got, []string{"HOME=/x"}) {
		t.Errorf("kept: %q", got)
	}
}

func TestCredentialFor(t *testing.T) {
	rootless := namespaceIDs{uids: parseIDMap("0 1000 1\n"), gids: parseIDMap("0 1000 1\n"), setgroups: false}
	host := namespaceIDs{uids: parseIDMap("0 0 4294967295\n"), gids: parseIDMap("0 0 4294967295\n"), setgroups: true}
	subids := namespaceIDs{uids: parseIDMap("0 1000 1\n1 100000 65536"), gids: parseIDMap("0 1000 1\n1 100000 65536"), setgroups: true}
	for name, tc := range map[string]struct {
		id      identity
		ns      namespaceIDs
		want    *syscall.Credential
		wantErr string
	}{
		"root on the host": {
			id: identity{implied: []uint32{0, 10}, extra: []uint32{10, 20}}, ns: host,
			want: &syscall.Credential{Groups: []uint32{0, 10, 20}},
		},
		"user on the host": {
			id: identity{uid: 1000, gid: 1000, implied: []uint32{1000}}, ns: host,
			want: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000}},
		},
		"rootless root keeps the agent's groups": {
			id: identity{implied: []uint32{0, 10}}, ns: rootless,
			want: &syscall.Credential{NoSetGroups: true},
		},
		"rootless user refused": {
			id: identity{uid: 1000, gid: 1000}, ns: rootless,
			wantErr: "the container's user is uid 1000 but the sandbox's user namespace maps uids only 0, the agent's own user; run the agent as root, or give the agent's user subordinate ids (a line user:100000:65536 in /etc/subuid and in /etc/subgid) and install newuidmap and newgidmap (Debian's uidmap package), or run the container as root",
		},
		"rootless group refused": {
			id: identity{uid: 0, gid: 5}, ns: rootless, wantErr: "gid 5 but the sandbox's user namespace maps gids only 0",
		},
		"rootless supplemental groups refused": {
			id: identity{extra: []uint32{0}}, ns: rootless, wantErr: "cannot set groups",
		},
		"subordinate ids drop unmapped image groups": {
			id: identity{uid: 1000, gid: 1000, implied: []uint32{1000, 70000}}, ns: subids,
			want: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000}},
		},
		"subordinate ids refuse unmapped supplemental groups": {
			id: identity{extra: []uint32{70000}}, ns: subids, wantErr: "supplemental group 70000 is not mapped by the sandbox's user namespace (it maps gids 0, 1-65536)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := credentialFor(tc.id, tc.ns)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadImageFile(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(path("passwd"), []byte(testPasswd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path("big"), make([]byte, maxImageFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path("limit"), make([]byte, maxImageFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", path("link-to-fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("passwd", path("link")); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		// file is the name under dir.
		file string
		// wantLen is the length read; wantErr part of the error.
		wantLen int
		wantErr string
	}{
		"regular":            {file: "passwd", wantLen: len(testPasswd)},
		"link to a regular":  {file: "link", wantLen: len(testPasswd)},
		"exactly the limit":  {file: "limit", wantLen: maxImageFile},
		"too large":          {file: "big", wantErr: "larger than 1 MiB"},
		"fifo":               {file: "fifo", wantErr: "is not a regular file (a FIFO)"},
		"link to a fifo":     {file: "link-to-fifo", wantErr: "is not a regular file (a FIFO)"},
		"directory":          {file: ".", wantErr: "is not a regular file (a directory)"},
		"character device":   {file: "/dev/null", wantErr: "is not a regular file (a character device)"},
		"missing is no file": {file: "missing", wantErr: "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			p := tc.file
			if !filepath.IsAbs(p) {
				p = path(p)
			}
			done := make(chan struct{})
			var b []byte
			var err error
			go func() { b, err = readImageFile(p); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("readImageFile blocked")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("readImageFile(%s) = %d bytes, %v; want an error saying %q", tc.file, len(b), err, tc.wantErr)
				}
				return
			}
			if err != nil || len(b) != tc.wantLen {
				t.Errorf("readImageFile(%s) = %d bytes, %v; want %d", tc.file, len(b), err, tc.wantLen)
			}
		})
	}
	if _, err := readImageFile(path("missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
}
