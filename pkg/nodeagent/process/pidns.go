package process

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// pidChoice is the PID namespace of one attempt's sandbox.
type pidChoice struct {
	// mode is the sandbox's Config.PIDNamespace.
	mode string
	// join names the namespace to join (sandbox.PIDJoin); closed by the
	// caller once the sandbox started.
	join *os.File
	// users, for a container with a user namespace, names the user
	// namespace of the process whose PID namespace it joins, which its
	// processes enter (StartOptions.JoinUserNamespace); closed with join.
	users *os.File
	// net, for a container of a pod with a network of its own, names the
	// pod's network namespace (runtime.Spec.NetworkNamespace), which its
	// processes are in; closed with join.
	net *os.File
	// release is called once the attempt ended (a pod's namespace is
	// kept while one of its containers runs); nil when nothing to do.
	release func()
}

// pidNamespace chooses the PID namespace of spec's sandbox, as CRI
// runtimes do: a namespace of its own, the pod's (a pause process is its
// PID 1, started with the first container that needs it), or a running
// target's. Without PID namespaces on this machine, the host's.
func (r *Runtime) pidNamespace(ctx context.Context, spec runtime.Spec) (pidChoice, error) {
	if !r.pidns {
		return pidChoice{mode: sandbox.PIDHost}, nil
	}
	switch spec.PIDNamespace {
	case runtime.PIDNamespaceHost:
		return pidChoice{mode: sandbox.PIDHost}, nil
	case runtime.PIDNamespacePod:
		return r.joinPod(ctx, spec)
	case runtime.PIDNamespaceTarget:
		h, ok := spec.PIDTarget.(*handle)
		if !ok || h == nil {
			return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "the target container is not running"}
		}
		select {
		case <-h.done:
			return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "the target container is not running"}
		default:
		}
		f, err := openPIDNamespace(h.pid)
		if err != nil {
			return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "joining the target container's process namespace: " + err.Error()}
		}
		pc := pidChoice{mode: sandbox.PIDJoin, join: f}
		if pc.users, err = openUserNamespace(spec, h.pid); err != nil {
			_ = f.Close()
			return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "joining the target container's user namespace: " + err.Error()}
		}
		return pc, nil
	default:
		return pidChoice{mode: sandbox.PIDContainer}, nil
	}
}

// openUserNamespace opens the user namespace of the host process pid for
// a container with one of its own (spec.UserNamespace); nil otherwise.
func openUserNamespace(spec runtime.Spec, pid int) (*os.File, error) {
	if spec.UserNamespace == nil {
		return nil, nil
	}
	return os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
}

// openPIDNamespace opens the PID namespace of the host process pid.
func openPIDNamespace(pid int) (*os.File, error) {
	return os.Open("/proc/" + strconv.Itoa(pid) + "/ns/pid")
}

// podNamespace is the PID namespace a pod's containers share: a pause
// sandbox, kept while one of them runs.
type podNamespace struct {
	// sb is the pause sandbox; its main process is the namespace's PID 1.
	sb *sandbox.Sandbox
	// scratch is its scratch directory.
	scratch string
	// users counts the attempts in it that have not ended.
	users int
}

// podNamespaces are the shared PID namespaces by pod UID.
type podNamespaces struct {
	// mu guards byPod and serialises starting a pause sandbox.
	mu sync.Mutex
	// byPod holds the namespaces in use.
	byPod map[string]*podNamespace
	// open opens a pause process's namespace; nil is openPIDNamespace
	// (tests make it fail).
	open func(pid int) (*os.File, error)
}

// joinPod returns the pod's shared namespace, starting its pause sandbox
// when none runs.
func (r *Runtime) joinPod(ctx context.Context, spec runtime.Spec) (pidChoice, error) {
	pods := &r.podNS
	pods.mu.Lock()
	defer pods.mu.Unlock()
	if pods.byPod == nil {
		pods.byPod = map[string]*podNamespace{}
	}
	ns := pods.byPod[spec.PodUID]
	if ns != nil {
		select {
		case <-ns.sb.Done():
			// Its pause process was killed: the namespace is gone.
			ns = nil
		default:
		}
	}
	if ns == nil {
		var err error
		if ns, err = r.startPause(ctx, spec); err != nil {
			return pidChoice{}, err
		}
		pods.byPod[spec.PodUID] = ns
	}
	open := pods.open
	if open == nil {
		open = openPIDNamespace
	}
	f, err := open(ns.sb.PID())
	if err != nil {
		// A pause sandbox no attempt uses (the one just started) would
		// otherwise run until the pod's next container or the agent's
		// end.
		if ns.users == 0 {
			pods.end(spec.PodUID, ns)
		}
		return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "joining the pod's process namespace: " + err.Error()}
	}
	users, err := openUserNamespace(spec, ns.sb.PID())
	if err != nil {
		_ = f.Close()
		if ns.users == 0 {
			pods.end(spec.PodUID, ns)
		}
		return pidChoice{}, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "joining the pod's user namespace: " + err.Error()}
	}
	ns.users++
	release := sync.OnceFunc(func() {
		pods.mu.Lock()
		defer pods.mu.Unlock()
		ns.users--
		if ns.users == 0 {
			pods.end(spec.PodUID, ns)
		}
	})
	return pidChoice{mode: sandbox.PIDJoin, join: f, users: users, release: release}, nil
}

// end kills ns, the namespace of pod uid no attempt uses any more, and
// removes its scratch directory once it is gone. Called with mu held.
func (pods *podNamespaces) end(uid string, ns *podNamespace) {
	ns.sb.Kill()
	if pods.byPod[uid] == ns {
		delete(pods.byPod, uid)
	}
	go func() {
		<-ns.sb.Done()
		_ = os.RemoveAll(ns.scratch)
	}()
}

// startPause starts the pause sandbox of spec's pod: a new PID namespace
// whose PID 1 only reaps, in a view of an empty image (nothing of the
// host's files is needed).
func (r *Runtime) startPause(ctx context.Context, spec runtime.Spec) (*podNamespace, error) {
	if err := os.MkdirAll(r.scratchRoot(), 0o700); err != nil {
		return nil, fmt.Errorf("creating scratch directory: %w", err)
	}
	dir, err := os.MkdirTemp(r.scratchRoot(), "pause-")
	if err != nil {
		return nil, fmt.Errorf("creating scratch directory: %w", err)
	}
	sb, err := sandbox.Start(ctx, sandbox.StartOptions{
		SubIDs:     r.subIDs,
		Executable: r.opts.Executable,
		Namespaces: true,
		Config: sandbox.Config{
			Isolate: true, Scratch: dir, Rootfs: &sandbox.Rootfs{},
			PIDNamespace: sandbox.PIDContainer, Pause: true,
			// The pod's user namespace, which its containers enter.
			UserNamespace: sandboxIDMapping(spec.UserNamespace),
		},
		Timeout: r.opts.StartTimeout,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, startError(err, "starting the pod's process namespace: ")
	}
	r.recordSandbox(sb, spec.PodNamespace+"/"+spec.PodName+"/(pause)")
	go func() {
		<-sb.Done()
		r.forgetSandbox(sb)
	}()
	return &podNamespace{sb: sb, scratch: dir}, nil
}

// network is the sandbox's StartOptions.Network: the pod's namespace when
// it has one, else the host's.
func (pc pidChoice) network() string {
	if pc.net != nil {
		return sandbox.NetworkJoin
	}
	return sandbox.NetworkHost
}

// openNetworkNamespace opens the pod's network namespace file, for a
// sandbox to join.
func openNetworkNamespace(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "joining the pod's network namespace: " + err.Error()}
	}
	return f, nil
}
