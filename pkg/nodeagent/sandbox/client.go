package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// StartOptions say how to start a sandbox.
type StartOptions struct {
	// Executable is the program to start as the sandbox; it must link this
	// package (the agent passes its own executable).
	Executable string
	// Config is what the sandbox runs.
	Config Config
	// Namespaces starts the sandbox in a new mount namespace, and in a new
	// user namespace (mapping the current user to root) when the current
	// user is not root. Required by Config.Isolate.
	Namespaces bool
	// Stdin, Stdout and Stderr are the main process's; nil is /dev/null.
	Stdin, Stdout, Stderr *os.File
}

// StartFailure is returned by Start when nothing runs; Reason is a
// container runtime's reason (ReasonStartError, ReasonCreateContainerError).
type StartFailure struct {
	// Reason is a CamelCase reason.
	Reason string
	// Message explains it.
	Message string
}

// Error implements error.
func (e *StartFailure) Error() string { return e.Reason + ": " + e.Message }

// Exit is how an attempt's main process ended.
type Exit struct {
	// Code is the exit code, 128+signal for a killed process.
	Code int32
	// Signal killed the process, 0 if it exited.
	Signal int32
	// Lost is true when the sandbox itself died without reporting (it was
	// killed); Code and Signal then describe the sandbox's end.
	Lost bool
}

// Sandbox is a running sandbox, seen from the agent.
type Sandbox struct {
	// cmd is the sandbox process.
	cmd *exec.Cmd
	// ctrl is the agent's end of the control socket.
	ctrl *net.UnixConn
	// mainPID is the main process's PID.
	mainPID int
	// startTime is the sandbox's start time, for KillSession.
	startTime uint64
	// done is closed once the sandbox has exited and exit is set.
	done chan struct{}
	// exit is how the main process ended.
	exit Exit

	// mu guards nextID and execs.
	mu sync.Mutex
	// nextID numbers exec requests.
	nextID uint64
	// execs are the exec requests waiting for an answer.
	execs map[uint64]chan message
	// sendMu serialises writes on ctrl.
	sendMu sync.Mutex
	// killOnce makes Kill's backstop start once.
	killOnce sync.Once
}

// Start starts a sandbox and waits until its main process runs. A
// *StartFailure says why nothing runs.
func Start(o StartOptions) (*Sandbox, error) {
	ctrl, peer, err := socketPair()
	if err != nil {
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		_ = ctrl.Close()
		_ = peer.Close()
		return nil, fmt.Errorf("creating the sandbox config pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:        o.Executable,
		Args:        []string{ArgvName},
		Env:         []string{},
		ExtraFiles:  []*os.File{peer, cfgR},
		SysProcAttr: sysProcAttr(o.Namespaces),
	}
	// exec.Cmd treats a nil *os.File field as "no file"; keep nil as nil.
	if o.Stdin != nil {
		cmd.Stdin = o.Stdin
	}
	if o.Stdout != nil {
		cmd.Stdout = o.Stdout
	}
	if o.Stderr != nil {
		cmd.Stderr = o.Stderr
	}
	err = cmd.Start()
	_ = peer.Close()
	_ = cfgR.Close()
	if err != nil {
		_ = cfgW.Close()
		_ = ctrl.Close()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("starting the sandbox: %v", err)}
	}
	s := &Sandbox{cmd: cmd, ctrl: ctrl, done: make(chan struct{}), execs: map[uint64]chan message{}}
	s.startTime = StartTime(cmd.Process.Pid)
	if err := json.NewEncoder(cfgW).Encode(o.Config); err != nil {
		_ = cfgW.Close()
		s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("sending the sandbox its config: %v", err)}
	}
	_ = cfgW.Close()
	first, files, err := receive(ctrl)
	closeAll(files)
	switch {
	case err != nil:
		st := s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("the sandbox ended before starting the container (%s)", st)}
	case first.Kind == kindStartFailed:
		s.abandon()
		return nil, &StartFailure{Reason: first.Reason, Message: first.Message}
	case first.Kind != kindStarted:
		s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "unexpected first message from the sandbox: " + first.Kind}
	}
	s.mainPID = first.PID
	go s.read()
	return s, nil
}

// sysProcAttr starts the sandbox as the leader of a new session, in new
// namespaces when asked.
func sysProcAttr(namespaces bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true}
	if !namespaces {
		return attr
	}
	attr.Cloneflags = syscall.CLONE_NEWNS
	if uid := os.Getuid(); uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	return attr
}

// abandon kills a sandbox that failed to start and reaps it; it returns
// how it ended.
func (s *Sandbox) abandon() string {
	_ = s.ctrl.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	close(s.done)
	if s.cmd.ProcessState == nil {
		return "unknown"
	}
	return s.cmd.ProcessState.String()
}

// read dispatches the sandbox's messages until it exits, then reaps it.
func (s *Sandbox) read() {
	reported := false
	for {
		m, files, err := receive(s.ctrl)
		closeAll(files)
		if err != nil {
			break
		}
		switch m.Kind {
		case kindExited:
			s.exit, reported = Exit{Code: m.Code, Signal: m.Signal}, true
		case kindExecStarted, kindExecFailed, kindExecExited:
			s.mu.Lock()
			ch := s.execs[m.ID]
			if m.Kind != kindExecStarted {
				delete(s.execs, m.ID)
			}
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
	_ = s.cmd.Wait()
	_ = s.ctrl.Close()
	if !reported {
		s.exit = Exit{Code: 137, Signal: int32(syscall.SIGKILL), Lost: true}
		if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.exit.Signal = int32(ws.Signal())
			s.exit.Code = 128 + s.exit.Signal
		}
		// Whatever the sandbox left behind is still in its session.
		KillSession(s.cmd.Process.Pid, s.startTime)
	}
	s.mu.Lock()
	for id, ch := range s.execs {
		ch <- message{Kind: kindExecExited, ID: id, Code: 137, Signal: int32(syscall.SIGKILL)}
		delete(s.execs, id)
	}
	s.mu.Unlock()
	close(s.done)
}

// PID is the main process's PID.
func (s *Sandbox) PID() int { return s.mainPID }

// SandboxPID is the sandbox process's PID, also its session id.
func (s *Sandbox) SandboxPID() int { return s.cmd.Process.Pid }

// SandboxStartTime is the sandbox process's start time (see KillSession).
func (s *Sandbox) SandboxStartTime() uint64 { return s.startTime }

// Done is closed when the sandbox has exited: the main process ended and
// nothing of the attempt is left.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Exit is how the main process ended; valid once Done is closed.
func (s *Sandbox) Exit() Exit { return s.exit }

// Signal sends sig to the main process's process group.
func (s *Sandbox) Signal(sig syscall.Signal) error {
	return s.send(message{Kind: kindSignal, Signal: int32(sig)})
}

// Kill kills every process of the attempt. If the sandbox does not answer
// within a few seconds, it and its session are killed from here.
func (s *Sandbox) Kill() {
	_ = s.send(message{Kind: kindKill})
	s.killOnce.Do(func() {
		go func() {
			t := time.NewTimer(5 * time.Second)
			defer t.Stop()
			select {
			case <-s.done:
			case <-t.C:
				KillSession(s.cmd.Process.Pid, s.startTime)
			}
		}()
	})
}

// send writes a message to the sandbox.
func (s *Sandbox) send(m message, files ...*os.File) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return send(s.ctrl, m, files...)
}

// ExecProcess is a command started in the sandbox by Exec.
type ExecProcess struct {
	// PID is its process id.
	PID int
	// ch receives its end.
	ch chan message
}

// Wait waits for the command to end and returns its exit code (128+signal
// when killed), or ctx's error.
func (p *ExecProcess) Wait(ctx context.Context) (int32, error) {
	select {
	case m := <-p.ch:
		return m.Code, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Exec starts argv inside the sandbox's view, with the container's
// environment and working directory, and stdin, stdout and stderr attached
// to the three files (one terminal when tty). The files may be closed once
// Exec returns.
func (s *Sandbox) Exec(argv []string, tty bool, stdin, stdout, stderr *os.File) (*ExecProcess, error) {
	select {
	case <-s.done:
		return nil, errors.New("container is not running")
	default:
	}
	ch := make(chan message, 2)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.execs[id] = ch
	s.mu.Unlock()
	if err := s.send(message{Kind: kindExec, ID: id, Argv: argv, TTY: tty}, stdin, stdout, stderr); err != nil {
		s.mu.Lock()
		delete(s.execs, id)
		s.mu.Unlock()
		return nil, fmt.Errorf("asking the sandbox to exec: %w", err)
	}
	m := <-ch
	switch m.Kind {
	case kindExecStarted:
		return &ExecProcess{PID: m.PID, ch: ch}, nil
	case kindExecFailed:
		return nil, &StartFailure{Reason: m.Reason, Message: m.Message}
	default:
		return nil, errors.New("container stopped before the command started")
	}
}
