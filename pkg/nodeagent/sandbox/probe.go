package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Probe reports whether sandboxes with a private filesystem view can be
// started here: it starts one in new namespaces that builds the view on
// scratch (an empty directory, removed afterwards) and exits, within
// timeout (0: DefaultStartTimeout) and while ctx lasts. The error says
// what the machine lacks.
func Probe(ctx context.Context, executable, scratch string, timeout time.Duration) error {
	return probeOnScratch(ctx, scratch, StartOptions{
		Executable: executable,
		Namespaces: true,
		Config:     Config{Isolate: true, Scratch: scratch, Probe: true},
		Timeout:    timeout,
	})
}

// ProbeSubIDs reports whether sandboxes can map ids (the user's
// subordinate ids): Probe, with them.
func ProbeSubIDs(ctx context.Context, executable, scratch string, timeout time.Duration, ids *SubIDs) error {
	return probeOnScratch(ctx, scratch, StartOptions{
		Executable: executable,
		Namespaces: true,
		SubIDs:     ids,
		Config:     Config{Isolate: true, Scratch: scratch, Probe: true},
		Timeout:    timeout,
	})
}

// ProbeUTS reports whether sandboxes can have a UTS namespace of their own
// with a hostname set in it: it starts one in new namespaces (those of
// StartOptions.Namespaces and UTS) that sets a hostname and exits, within
// timeout (0: DefaultStartTimeout) and while ctx lasts. It builds no view.
// The error says what the machine lacks.
func ProbeUTS(ctx context.Context, executable string, timeout time.Duration) error {
	return runProbe(ctx, StartOptions{
		Executable: executable,
		Namespaces: true,
		UTS:        true,
		Config:     Config{Probe: true, Hostname: "jobkeeper-probe"},
		Timeout:    timeout,
	})
}

// ProbePID reports whether containers can have a PID namespace of their
// own: it starts a sandbox that builds a private view on scratch (an empty
// directory, removed afterwards) and runs the init stage in a new PID
// namespace, where it mounts that namespace's /proc over the view's, then
// exits; within timeout (0: DefaultStartTimeout) and while ctx lasts. The
// error says what the machine lacks (a kernel without pidfd_open, or a
// /proc that a user namespace may not mount again, as in a container whose
// /proc has paths masked).
func ProbePID(ctx context.Context, executable, scratch string, timeout time.Duration) error {
	return probeOnScratch(ctx, scratch, StartOptions{
		Executable: executable,
		Namespaces: true,
		Config:     Config{Isolate: true, Scratch: scratch, Probe: true, PIDNamespace: PIDContainer},
		Timeout:    timeout,
	})
}

// ProbeUserNamespace reports whether containers can have a user
// namespace of their own (Config.UserNamespace): it starts a sandbox that
// builds a view on scratch (an empty directory, removed afterwards) of an
// empty image (whose one layer is an empty directory of the scratch
// tmpfs, as a memory-backed emptyDir's tmpfs) and a volume, a directory
// beside scratch (so on its filesystem, which holds the agent's data),
// all idmapped through a new user namespace, with a PID namespace and its
// /proc; within timeout (0: DefaultStartTimeout) and while ctx lasts.
// Nothing is mounted outside the sandbox's mount namespace. The error
// says what the machine lacks (a sandbox not run by root, a kernel or a
// filesystem without idmapped mounts: tmpfs has them from Linux 6.3).
func ProbeUserNamespace(ctx context.Context, executable, scratch string, timeout time.Duration) error {
	vol := scratch + ".volume"
	if err := os.MkdirAll(vol, 0o700); err != nil {
		return fmt.Errorf("creating probe directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(vol) }()
	return probeOnScratch(ctx, scratch, StartOptions{
		Executable: executable,
		Namespaces: true,
		Config: Config{Isolate: true, Scratch: scratch, Probe: true, PIDNamespace: PIDContainer,
			Rootfs: &Rootfs{}, Mounts: []Mount{{Source: vol, Target: "/volume"}},
			UserNamespace: &IDMapping{HostUID: MappedIDs, HostGID: MappedIDs, Size: MappedIDs}},
		Timeout: timeout,
	})
}

// probeOnScratch creates scratch, runs the probe sandbox opts (whose view
// is built there) with runProbe and removes scratch afterwards.
func probeOnScratch(ctx context.Context, scratch string, opts StartOptions) error {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return fmt.Errorf("creating probe directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	return runProbe(ctx, opts)
}

// runProbe starts the probe sandbox opts and waits for it to exit; the
// error is Start's.
func runProbe(ctx context.Context, opts StartOptions) error {
	s, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	<-s.Done()
	return nil
}
