package sandbox

import (
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp is the seccomp profile of a container's processes; a nil
// *Seccomp in Config means Unconfined.
type Seccomp struct {
	// RuntimeDefault asks for the runtime's default profile: Docker's
	// (moby/profiles, which containerd's default equals), with the rules
	// that depend on capabilities resolved for the container's.
	RuntimeDefault bool `json:"runtimeDefault,omitempty"`
	// Profile is a Localhost profile, in the JSON format Docker and
	// containerd read (defaultAction, syscalls with names, action, args,
	// errnoRet), when RuntimeDefault is false.
	Profile []byte `json:"profile,omitempty"`
	// Name says where the profile came from (a Localhost profile's file),
	// for messages.
	Name string `json:"name,omitempty"`
}

// seccompArchOffset is where struct seccomp_data holds the architecture.
const seccompArchOffset = 4

// compileSeccomp turns a profile into the BPF program the kernel runs,
// for a container with the capabilities caps (rules of the default
// profile depend on them). Only the native architecture's system calls
// pass it: others fail with ENOSYS whatever the profile (Docker's profile
// lets 32-bit x86 calls through on amd64). System calls the filter's tables
// do not know are left out, as libseccomp leaves them out. An action
// or argument comparison the filter cannot express is an error.
func compileSeccomp(sc *Seccomp, caps []string) ([]unix.SockFilter, error) {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}}}
	var prof *specs.LinuxSeccomp
	var err error
	if sc.RuntimeDefault {
		prof, err = seccomp.GetDefaultProfile(spec)
	} else {
		prof, err = seccomp.LoadProfile(string(sc.Profile), spec)
	}
	if err != nil {
		return nil, err
	}
	if prof == nil {
		return nil, errors.New("the profile has no default action and no rule")
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	policy, def, err := seccompPolicy(prof, native)
	if err != nil {
		return nil, err
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	// The library takes only plain actions as the default (no errno of
	// their own); its program ends with the default's return, which is
	// also where a call of another architecture jumps.
	plain := uint32(policy.DefaultAction)
	if policy.DefaultAction == seccompbpf.ActionErrno {
		// Which the library returns as EPERM.
		plain |= uint32(unix.EPERM)
	}
	last, ok := insts[len(insts)-1].(bpf.RetConstant)
	if !ok || last.Val != plain {
		return nil, fmt.Errorf("the filter library's program does not end with its default action")
	}
	insts[len(insts)-1] = bpf.RetConstant{Val: uint32(def)}
	// Another architecture's calls (32-bit x86 on amd64) are refused
	// before the profile is looked at: its rules name this architecture's
	// numbers, and a profile whose default allows would let them all by.
	insts = append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompArchOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccompbpf.ActionErrno) | uint32(unix.ENOSYS)},
	}, insts...)
	if len(insts) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("the profile compiles to %d instructions, more than the kernel takes (%d)", len(insts), unix.BPF_MAXINSNS)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// seccompPolicy translates an OCI seccomp profile into the filter
// library's policy: the rules in order (the first that matches a call
// decides), then the default action, returned apart (the policy holds
// the plain action, without the errno it returns).
func seccompPolicy(prof *specs.LinuxSeccomp, native *arch.Info) (*seccompbpf.Policy, seccompbpf.Action, error) {
	defaultErrno := uint(unix.EPERM)
	if prof.DefaultErrnoRet != nil {
		defaultErrno = *prof.DefaultErrnoRet
	}
	def, err := seccompAction(prof.DefaultAction, nil, defaultErrno)
	if err != nil {
		return nil, 0, fmt.Errorf("defaultAction: %w", err)
	}
	policy := &seccompbpf.Policy{DefaultAction: def &^ unix.SECCOMP_RET_DATA}
	for i, rule := range prof.Syscalls {
		action, err := seccompAction(rule.Action, rule.ErrnoRet, defaultErrno)
		if err != nil {
			return nil, 0, fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		var conds seccompbpf.ArgumentConditions
		for _, a := range rule.Args {
			c, err := seccompCondition(a)
			if err != nil {
				return nil, 0, fmt.Errorf("syscalls[%d]: %w", i, err)
			}
			conds = append(conds, c)
		}
		group := seccompbpf.SyscallGroup{Action: action}
		for _, name := range rule.Names {
			if _, known := native.SyscallNames[name]; !known {
				continue
			}
			if len(conds) == 0 {
				group.Names = append(group.Names, name)
			} else {
				group.NamesWithCondtions = append(group.NamesWithCondtions, seccompbpf.NameWithConditions{Name: name, Conditions: conds})
			}
		}
		if len(group.Names) > 0 || len(group.NamesWithCondtions) > 0 {
			policy.Syscalls = append(policy.Syscalls, group)
		}
	}
	return policy, def, nil
}

// seccompAction is the filter's action for an OCI action; errnoRet, or
// else defaultErrno, is the error an SCMP_ACT_ERRNO call returns.
func seccompAction(a specs.LinuxSeccompAction, errnoRet *uint, defaultErrno uint) (seccompbpf.Action, error) {
	errno := defaultErrno
	if errnoRet != nil {
		errno = *errnoRet
	}
	switch a {
	case specs.ActAllow:
		return seccompbpf.ActionAllow, nil
	case specs.ActErrno:
		return seccompbpf.ActionErrno | seccompbpf.Action(errno&unix.SECCOMP_RET_DATA), nil
	case specs.ActKill, specs.ActKillThread:
		return seccompbpf.ActionKillThread, nil
	case specs.ActKillProcess:
		return seccompbpf.ActionKillProcess, nil
	case specs.ActTrap:
		return seccompbpf.ActionTrap, nil
	case specs.ActLog:
		return seccompbpf.ActionLog, nil
	case specs.ActTrace:
		return seccompbpf.ActionTrace | seccompbpf.Action(errno&unix.SECCOMP_RET_DATA), nil
	}
	return 0, fmt.Errorf("action %q is not supported by the local node agent", a)
}

// seccompCondition is the filter's condition for an OCI argument rule.
// SCMP_CMP_MASKED_EQ ((arg & value) == valueTwo) is expressible when
// valueTwo is 0 (no bit of value set) or, for a single bit, value (it is
// set).
func seccompCondition(a specs.LinuxSeccompArg) (seccompbpf.Condition, error) {
	c := seccompbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
	switch a.Op {
	case specs.OpEqualTo:
		c.Operation = seccompbpf.Equal
	case specs.OpNotEqual:
		c.Operation = seccompbpf.NotEqual
	case specs.OpLessThan:
		c.Operation = seccompbpf.LessThan
	case specs.OpLessEqual:
		c.Operation = seccompbpf.LessOrEqual
	case specs.OpGreaterThan:
		c.Operation = seccompbpf.GreaterThan
	case specs.OpGreaterEqual:
		c.Operation = seccompbpf.GreaterOrEqual
	case specs.OpMaskedEqual:
		switch {
		case a.ValueTwo == 0:
			c.Operation = seccompbpf.BitsNotSet
		case a.ValueTwo == a.Value && bits.OnesCount64(a.Value) == 1:
			c.Operation = seccompbpf.BitsSet
		default:
			return c, fmt.Errorf("argument %d: SCMP_CMP_MASKED_EQ with mask %#x and value %#x is not supported by the local node agent", a.Index, a.Value, a.ValueTwo)
		}
	default:
		return c, fmt.Errorf("argument %d: operator %q is not supported by the local node agent", a.Index, a.Op)
	}
	return c, nil
}

// seccompError is the message of a profile that cannot be used.
func seccompError(sc *Seccomp, err error) string {
	if sc.RuntimeDefault {
		return "the RuntimeDefault seccomp profile: " + err.Error()
	}
	return fmt.Sprintf("seccomp profile %s: %v", sc.Name, err)
}

// loadSeccomp installs the filter on the calling thread, which must be
// locked to its goroutine and about to execute a container's process (or
// fork one, which inherits it). Without no_new_privs the thread needs
// CAP_SYS_ADMIN, which it has until it takes the container's user: the
// filter is loaded before, and lets the calls that follow through.
func loadSeccomp(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return nil
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("loading the container's seccomp filter: %w", errno)
	}
	return nil
}
