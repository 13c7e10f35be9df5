package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Kinds of message between the agent and a sandbox.
const (
	// kindStarted (sandbox → agent): the main process runs as PID; for a
	// probe, the view could be built.
	kindStarted = "started"
	// kindStartFailed (sandbox → agent): nothing runs; Reason and Message
	// say why. The sandbox exits.
	kindStartFailed = "startFailed"
	// kindExited (sandbox → agent): the main process ended with Code (and
	// Signal) and everything else the attempt started was killed. The
	// sandbox exits.
	kindExited = "exited"
	// kindSignal (agent → sandbox): send Signal to the main process (not
	// to its process group).
	kindSignal = "signal"
	// kindKill (agent → sandbox): kill every process of the attempt.
	kindKill = "kill"
	// kindExec (agent → sandbox): run Argv in the view, with the three
	// file descriptors attached as stdin, stdout and stderr (TTY: they are
	// one terminal, which becomes the controlling one).
	kindExec = "exec"
	// kindExecStarted (sandbox → agent): exec request ID runs as PID.
	kindExecStarted = "execStarted"
	// kindExecFailed (sandbox → agent): exec request ID could not start.
	kindExecFailed = "execFailed"
	// kindExecExited (sandbox → agent): exec request ID ended with Code.
	kindExecExited = "execExited"
	// kindExecCancel (agent → sandbox): kill exec request ID, whose caller
	// gave up before it started, if it runs.
	kindExecCancel = "execCancel"
	// kindAdopted (durable sandbox → agent): the first message on a
	// connection to the control socket: the main process runs as PID and
	// the connecting agent now holds the sandbox, as the agent that started
	// it did.
	kindAdopted = "adopted"
)

// message is one datagram on the control socket.
type message struct {
	// Kind is one of the kind constants.
	Kind string `json:"kind"`
	// ID matches exec requests and their answers.
	ID uint64 `json:"id,omitempty"`
	// PID is the process started.
	PID int `json:"pid,omitempty"`
	// Code is an exit code (128+signal for a killed process).
	Code int32 `json:"code,omitempty"`
	// Signal is the signal sent (kindSignal) or that killed the process.
	Signal int32 `json:"signal,omitempty"`
	// At is when the main process ended (kindExited), Unix nanoseconds.
	At int64 `json:"at,omitempty"`
	// Reason and Message explain a failure.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Argv is the command of an exec request.
	Argv []string `json:"argv,omitempty"`
	// TTY says the exec request's descriptors are a terminal.
	TTY bool `json:"tty,omitempty"`
	// User is who the main process runs as (kindStarted), when the
	// sandbox was given a User.
	User *Identity `json:"user,omitempty"`
}

// maxMessage bounds a datagram: argv of an exec request included.
const maxMessage = 256 << 10

// send writes one message, passing files along with it.
func send(c *net.UnixConn, m message, files ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMessage {
		return errors.New("sandbox message too large")
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	return err
}

// receive reads one message and the files passed with it.
func receive(c *net.UnixConn) (message, []*os.File, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, err
	}
	if n == 0 && oobn == 0 {
		// A zero-length datagram on a sequenced-packet socket is the
		// peer's end of file.
		return message{}, nil, errEOF
	}
	var files []*os.File
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return message{}, nil, fmt.Errorf("reading passed descriptors: %w", err)
		}
		for _, cm := range cmsgs {
			fds, err := unix.ParseUnixRights(&cm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "passed"))
			}
		}
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(files)
		return message{}, nil, fmt.Errorf("decoding sandbox message: %w", err)
	}
	return m, files, nil
}

// errEOF is returned by receive when the peer closed its end.
var errEOF = errors.New("sandbox control socket closed")

// closeAll closes files.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// socketPair returns the two ends of a sequenced-packet socket pair: the
// agent's as a connection, the sandbox's as a file to hand to the child.
func socketPair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the sandbox socket: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "sandbox-control")
	defer func() { _ = mine.Close() }()
	conn, err := net.FileConn(mine)
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("creating the sandbox socket: %w", err)
	}
	return conn.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "sandbox-control-peer"), nil
}
