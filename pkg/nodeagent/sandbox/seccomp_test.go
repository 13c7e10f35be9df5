package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestSeccompCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		arg     specs.LinuxSeccompArg
		want    seccompbpf.Operation
		wantErr string
	}{
		"equal":                   {arg: specs.LinuxSeccompArg{Op: specs.OpEqualTo, Value: 8}, want: seccompbpf.Equal},
		"not equal":               {arg: specs.LinuxSeccompArg{Op: specs.OpNotEqual, Value: 40}, want: seccompbpf.NotEqual},
		"greater or equal":        {arg: specs.LinuxSeccompArg{Op: specs.OpGreaterEqual, Value: 1}, want: seccompbpf.GreaterOrEqual},
		"masked equal to zero":    {arg: specs.LinuxSeccompArg{Op: specs.OpMaskedEqual, Value: 0x7e020000, ValueTwo: 0}, want: seccompbpf.BitsNotSet},
		"masked equal, one bit":   {arg: specs.LinuxSeccompArg{Op: specs.OpMaskedEqual, Value: 0x10, ValueTwo: 0x10}, want: seccompbpf.BitsSet},
		"masked equal, two bits":  {arg: specs.LinuxSeccompArg{Index: 2, Op: specs.OpMaskedEqual, Value: 0x30, ValueTwo: 0x30}, wantErr: "argument 2: SCMP_CMP_MASKED_EQ"},
		"masked equal, some bits": {arg: specs.LinuxSeccompArg{Op: specs.OpMaskedEqual, Value: 0x30, ValueTwo: 0x10}, wantErr: "SCMP_CMP_MASKED_EQ"},
		"unknown operator":        {arg: specs.LinuxSeccompArg{Op: "SCMP_CMP_SOMETHING"}, wantErr: `operator "SCMP_CMP_SOMETHING"`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := seccompCondition(tc.arg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Operation != tc.want || got.Value != tc.arg.Value {
				t.Errorf("seccompCondition = %+v, %v; want %s of %#x", got, err, tc.want, tc.arg.Value)
			}
		})
	}
}

func TestSeccompAction(t *testing.T) {
	enosys := uint(38)
	for name, tc := range map[string]struct {
		action  specs.LinuxSeccompAction
		errno   *uint
		want    seccompbpf.Action
		wantErr bool
	}{
		"allow":                {action: specs.ActAllow, want: seccompbpf.ActionAllow},
		"errno: the default":   {action: specs.ActErrno, want: seccompbpf.ActionErrno | 1},
		"errno: the rule's":    {action: specs.ActErrno, errno: &enosys, want: seccompbpf.ActionErrno | 38},
		"kill is the thread's": {action: specs.ActKill, want: seccompbpf.ActionKillThread},
		"kill process":         {action: specs.ActKillProcess, want: seccompbpf.ActionKillProcess},
		"log":                  {action: specs.ActLog, want: seccompbpf.ActionLog},
		"notify: no listener":  {action: specs.ActNotify, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := seccompAction(tc.action, tc.errno, 1)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("seccompAction = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestCompileDefaultProfile: the runtime's default profile compiles into a
// program the kernel takes (at most 4,096 instructions) for the default
// capabilities, for none and for CAP_SYS_ADMIN.
func TestCompileDefaultProfile(t *testing.T) {
	for _, caps := range [][]string{DefaultCapabilities, nil, ContainerCapabilities([]string{"SYS_ADMIN"}, nil)} {
		f, err := compileSeccomp(&Seccomp{RuntimeDefault: true}, caps)
		if err != nil {
			t.Fatalf("caps %v: %v", caps, err)
		}
		if len(f) < 100 || len(f) > 4096 {
			t.Errorf("caps %v: %d instructions", caps, len(f))
		}
	}
}

// TestSeccompRuntimeDefault: with RuntimeDefault the main process and
// exec'd commands are filtered (mode 2) and a call the profile refuses
// (keyctl, which needs no capability) fails with EPERM, while ordinary
// programs run; Unconfined and privileged containers are not filtered.
func TestSeccompRuntimeDefault(t *testing.T) {
	requirePID(t)
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"RuntimeDefault":         {cfg: Config{Capabilities: DefaultCapabilities, Seccomp: &Seccomp{RuntimeDefault: true}}, want: "Seccomp:\t2\nkeyctl refused\n"},
		"Unconfined":             {cfg: Config{Capabilities: DefaultCapabilities}, want: "Seccomp:\t0\nkeyctl ran\n"},
		"privileged: unconfined": {cfg: Config{Privileged: true, Seccomp: &Seccomp{RuntimeDefault: true}}, want: "Seccomp:\t0\nkeyctl ran\n"},
	} {
		for _, pidns := range []string{PIDHost, PIDContainer} {
			t.Run(name+"/pid="+pidns, func(t *testing.T) {
				cfg := tc.cfg
				cfg.PIDNamespace = pidns
				cfg.Command = []string{"sleep", "3600"}
				s, _ := startTest(t, true, cfg)
				// keyctl(KEYCTL_GET_KEYRING_ID, the session keyring, 0):
				// EPERM only from the filter.
				script := fmt.Sprintf(`grep ^Seccomp: /proc/self/status; perl -e 'syscall(%d, 0, -3, 0) >= 0 || $!{EPERM} == 0 ? print "keyctl ran\n" : print "keyctl refused\n"'`, unix.SYS_KEYCTL)
				got, code := execOutput(t, s, "sh", "-c", script)
				if code != 0 {
					t.Fatalf("exec exited %d: %q", code, got)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("exec'd command (-want +got):\n%s", diff)
				}
				if st := statusLine(t, s.PID(), "Seccomp:"); st != strings.SplitN(tc.want, "\n", 2)[0] {
					t.Errorf("main process: %q, want %q", st, strings.SplitN(tc.want, "\n", 2)[0])
				}
			})
		}
	}
}

// TestSeccompLocalhost: a profile of the Docker format is applied as
// written; one that cannot be read as a profile fails the start naming
// it.
func TestSeccompLocalhost(t *testing.T) {
	requirePID(t)
	profile := `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`
	dir := t.TempDir()
	s, output := startTest(t, true, Config{
		Capabilities: DefaultCapabilities,
		PIDNamespace: PIDContainer,
		Seccomp:      &Seccomp{Profile: []byte(profile), Name: "profiles/no-mkdir.json"},
		Mounts:       []Mount{{Source: dir, Target: "/work"}},
		Command:      []string{"sh", "-c", "mkdir /work/x 2>&1 | grep -o 'Operation not permitted'; touch /work/y && echo touched"},
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit %+v", ex)
	}
	if got := output(); got != "Operation not permitted\ntouched\n" {
		t.Errorf("output %q", got)
	}

	exe, _ := os.Executable()
	scratch := filepath.Join(t.TempDir(), "scratch")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), StartOptions{Executable: exe, Namespaces: true, Config: Config{
		Isolate: true, Scratch: scratch, Command: []string{"true"},
		Seccomp: &Seccomp{Profile: []byte(`{"defaultAction": `), Name: "profiles/broken.json"},
	}})
	var sf *StartFailure
	if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, "seccomp profile profiles/broken.json") {
		t.Errorf("start with a broken profile: %v, want CreateContainerError naming the profile", err)
	}
}

// statusLine is the line of process pid's status that starts with key.
func statusLine(t *testing.T, pid int, key string) string {
	t.Helper()
	for _, l := range strings.Split(capLinesOf(t, pid, key), "\n") {
		if l != "" {
			return l
		}
	}
	return ""
}

// TestSeccompRefusesOtherArchitectures: whatever the profile's default,
// the program first sends another architecture's calls to ENOSYS (its
// rules name this architecture's numbers only).
func TestSeccompRefusesOtherArchitectures(t *testing.T) {
	f, err := compileSeccomp(&Seccomp{Profile: []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}]}`), Name: "allow.json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f) < 3 || f[0].K != seccompArchOffset || f[2].K != uint32(seccompbpf.ActionErrno)|uint32(unix.ENOSYS) {
		t.Errorf("the program does not start with the architecture check: %+v", f[:3])
	}
}
