package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerCapabilities(t *testing.T) {
	all := allCapabilities()
	tests := map[string]struct {
		add, drop []string
		want      []string
	}{
		"nothing asked: containerd's default": {
			want: sortedCopy(DefaultCapabilities),
		},
		"drop ALL": {
			drop: []string{"ALL"},
			want: []string{},
		},
		"drop ALL, add one back (restricted's NET_BIND_SERVICE)": {
			drop: []string{"ALL"},
			add:  []string{"NET_BIND_SERVICE"},
			want: []string{"CAP_NET_BIND_SERVICE"},
		},
		"add and drop single names, any case and prefix": {
			add:  []string{"sys_admin", "CAP_NET_ADMIN", "NET_ADMIN"},
			drop: []string{"chown", "CAP_KILL"},
			want: sortedCopy(append(without(DefaultCapabilities, "CAP_CHOWN", "CAP_KILL"), "CAP_SYS_ADMIN", "CAP_NET_ADMIN")),
		},
		"add ALL": {
			add:  []string{"ALL"},
			want: sortedCopy(all),
		},
		"add ALL, drop one": {
			add:  []string{"all"},
			drop: []string{"SYS_ADMIN"},
			want: sortedCopy(without(all, "CAP_SYS_ADMIN")),
		},
		"add ALL and drop ALL: none, as containerd": {
			add:  []string{"ALL"},
			drop: []string{"ALL"},
			want: []string{},
		},
		"dropping one not held changes nothing": {
			drop: []string{"SYS_ADMIN"},
			want: sortedCopy(DefaultCapabilities),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ContainerCapabilities(tc.add, tc.drop)
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ContainerCapabilities(%q, %q) (-want +got):\n%s", tc.add, tc.drop, diff)
			}
		})
	}
	if len(DefaultCapabilities) != 14 {
		t.Errorf("containerd's default set has 14 capabilities, DefaultCapabilities %d", len(DefaultCapabilities))
	}
}

func TestParseCapabilitiesIgnoresUnknown(t *testing.T) {
	keep, unknown := parseCapabilities([]string{"CAP_CHOWN", "kill", "CAP_NO_SUCH_THING"})
	if len(keep) != 2 || keep[0].String() != "chown" || keep[1].String() != "kill" {
		t.Errorf("keep = %v, want chown and kill", keep)
	}
	if diff := cmp.Diff([]string{"CAP_NO_SUCH_THING"}, unknown); diff != "" {
		t.Errorf("unknown (-want +got):\n%s", diff)
	}
}

// TestCapabilities: the main process and exec'd commands hold exactly the
// container's capabilities (as root: bounding, permitted and effective
// sets; inheritable and ambient empty), every one when privileged, in
// the host's PID namespace and in one of their own.
func TestCapabilities(t *testing.T) {
	requirePID(t)
	// Privileged: all the sandbox has: what this process has as root (a
	// machine's container may lack some), every one in the user namespace
	// of a sandbox run by another user.
	full := ownBounding(t)
	if os.Getuid() != 0 {
		full = capMask(allCapabilities())
	}
	tests := map[string]struct {
		cfg      Config
		bounding uint64
	}{
		"default":                   {cfg: Config{Capabilities: DefaultCapabilities}, bounding: capMask(DefaultCapabilities)},
		"drop ALL":                  {cfg: Config{Capabilities: ContainerCapabilities(nil, []string{"ALL"})}, bounding: 0},
		"add SYS_PTRACE":            {cfg: Config{Capabilities: ContainerCapabilities([]string{"SYS_PTRACE"}, nil)}, bounding: capMask(ContainerCapabilities([]string{"SYS_PTRACE"}, nil))},
		"privileged":                {cfg: Config{Privileged: true}, bounding: full},
		"nothing said: none":        {cfg: Config{}, bounding: 0},
		"with no_new_privs as well": {cfg: Config{Capabilities: DefaultCapabilities, NoNewPrivileges: true}, bounding: capMask(DefaultCapabilities)},
	}
	for name, tc := range tests {
		for _, pidns := range []string{PIDHost, PIDContainer} {
			t.Run(fmt.Sprintf("%s/pid=%q", name, pidns), func(t *testing.T) {
				cfg := tc.cfg
				cfg.PIDNamespace = pidns
				cfg.Command = []string{"sleep", "3600"}
				s, _ := startTest(t, true, cfg)
				got, code := execOutput(t, s, "sh", "-c", "grep ^Cap /proc/self/status")
				if code != 0 {
					t.Fatalf("exec exited %d: %q", code, got)
				}
				want := capStatus(tc.bounding, tc.bounding, tc.bounding)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("exec'd command's capabilities (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(want, capLines(t, s.PID())); diff != "" {
					t.Errorf("main process's capabilities (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestCapabilitiesOfAnotherUser: a container running as a user other than
// root has none in effect, whatever its set, which stays its bounding set.
func TestCapabilitiesOfAnotherUser(t *testing.T) {
	requireNamespaces(t)
	if os.Getuid() != 0 {
		t.Skip("a sandbox run by a user other than root runs containers as root only")
	}
	uid := int64(1000)
	s, _ := startTest(t, true, Config{
		Capabilities: DefaultCapabilities,
		User:         &User{RunAsUser: &uid, RunAsGroup: &uid},
		Command:      []string{"sleep", "3600"},
	})
	got, code := execOutput(t, s, "sh", "-c", "grep ^Cap /proc/self/status")
	if code != 0 {
		t.Fatalf("exec exited %d: %q", code, got)
	}
	if diff := cmp.Diff(capStatus(0, 0, capMask(DefaultCapabilities)), got); diff != "" {
		t.Errorf("capabilities of uid 1000 (-want +got):\n%s", diff)
	}
}

// capLines are the capability lines of process pid's status.
func capLines(t *testing.T, pid int) string {
	t.Helper()
	return capLinesOf(t, pid, "Cap")
}

// capLinesOf are the lines of process pid's status that start with prefix.
func capLinesOf(t *testing.T, pid int, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			out.WriteString(l)
		}
	}
	return out.String()
}

// ownBounding is this process's bounding set.
func ownBounding(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:\t"); ok {
			m, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return 0
}

// capMask is the kernel's mask of the named capabilities it has.
func capMask(names []string) uint64 {
	keep, _ := parseCapabilities(names)
	var m uint64
	for _, c := range keep {
		m |= 1 << uint(c)
	}
	return m
}

// capStatus is what /proc/<pid>/status says of a process's capabilities.
func capStatus(permitted, effective, bounding uint64) string {
	return fmt.Sprintf("CapInh:\t%016x\nCapPrm:\t%016x\nCapEff:\t%016x\nCapBnd:\t%016x\nCapAmb:\t%016x\n", 0, permitted, effective, bounding, 0)
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func without(s []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(v string) bool { return slices.Contains(drop, v) })
}
