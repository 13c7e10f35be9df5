package logfile

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// DefaultMaxSize is the size at which a log file is rotated.
const DefaultMaxSize = 10 << 20

// Writer appends container output to a log file, rotating it at a size
// limit. It is safe for concurrent use by the stdout and stderr copiers.
type Writer struct {
	// path is the current log file: its name in dir when dir is set.
	path string
	// dir, when not nil, is the directory the file is opened and rotated
	// in, by descriptor (NewWriterIn); nil: path is a path.
	dir *os.File
	// maxSize is the rotation threshold in bytes.
	maxSize int64
	// clock stamps each line.
	clock clock.PassiveClock

	// mu guards everything below.
	mu sync.Mutex
	// f is the open log file.
	f *os.File
	// size is the number of bytes in f.
	size int64
	// partial holds, per stream, output not yet ended by a newline.
	partial map[string][]byte
}

// NewWriter opens (appending) the log file at path.
func NewWriter(path string, maxSize int64, clk clock.PassiveClock) (*Writer, error) {
	return newWriter(nil, path, maxSize, clk)
}

// NewWriterIn opens (appending) the log file name in the directory dir and
// rotates it there, by descriptor: it keeps working for a process whose
// root changed after the call (a container's sandbox, which writes its own
// log after entering the container's view). dir must stay open while the
// Writer is used.
func NewWriterIn(dir *os.File, name string, maxSize int64, clk clock.PassiveClock) (*Writer, error) {
	return newWriter(dir, name, maxSize, clk)
}

// newWriter opens (appending) the log file path, relative to dir when dir
// is not nil, and returns its Writer.
func newWriter(dir *os.File, path string, maxSize int64, clk clock.PassiveClock) (*Writer, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	w := &Writer{path: path, dir: dir, maxSize: maxSize, clock: clk, partial: map[string][]byte{}}
	f, err := w.open()
	if err != nil {
		return nil, fmt.Errorf("opening log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("reading log file size: %w", err)
	}
	w.f, w.size = f, st.Size()
	return w, nil
}

// open opens the current file for appending, creating it.
func (w *Writer) open() (*os.File, error) {
	if w.dir == nil {
		return os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	}
	fd, err := unix.Openat(int(w.dir.Fd()), w.path, unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: w.path, Err: err}
	}
	return os.NewFile(uintptr(fd), w.path), nil
}

// rename moves the current file to its rotated name.
func (w *Writer) rename() error {
	if w.dir == nil {
		return os.Rename(w.path, w.path+".1")
	}
	if err := unix.Renameat(int(w.dir.Fd()), w.path, int(w.dir.Fd()), w.path+".1"); err != nil {
		return &os.LinkError{Op: "renameat", Old: w.path, New: w.path + ".1", Err: err}
	}
	return nil
}

// Stream returns an io.Writer for one stream ("stdout" or "stderr").
func (w *Writer) Stream(name string) *StreamWriter { return &StreamWriter{w: w, stream: name} }

// StreamWriter is the io.Writer of one stream.
type StreamWriter struct {
	// w is the shared log file writer.
	w *Writer
	// stream is "stdout" or "stderr".
	stream string
}

// Write stores every complete line of p; the rest waits for more output.
func (s *StreamWriter) Write(p []byte) (int, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	buf := append(s.w.partial[s.stream], p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		if err := s.w.writeLine(s.stream, 'F', buf[:i]); err != nil {
			return 0, err
		}
		buf = buf[i+1:]
	}
	// Bound memory held for a stream that never prints a newline.
	if len(buf) >= 16<<10 {
		if err := s.w.writeLine(s.stream, 'P', buf); err != nil {
			return 0, err
		}
		buf = nil
	}
	s.w.partial[s.stream] = append([]byte(nil), buf...)
	return len(p), nil
}

// writeLine appends one record; mu is held.
func (w *Writer) writeLine(stream string, tag byte, content []byte) error {
	if w.f == nil {
		return os.ErrClosed
	}
	rec := make([]byte, 0, len(content)+64)
	rec = w.clock.Now().UTC().AppendFormat(rec, time.RFC3339Nano)
	rec = append(rec, ' ')
	rec = append(rec, stream...)
	rec = append(rec, ' ', tag, ' ')
	rec = append(rec, content...)
	rec = append(rec, '\n')
	if w.size > 0 && w.size+int64(len(rec)) > w.maxSize {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.f.Write(rec)
	w.size += int64(n)
	if err != nil {
		return fmt.Errorf("writing log file: %w", err)
	}
	return nil
}

// rotate moves the current file to path.1 and starts a new one; mu is held.
func (w *Writer) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("closing log file for rotation: %w", err)
	}
	w.f = nil
	if err := w.rename(); err != nil {
		return fmt.Errorf("rotating log file: %w", err)
	}
	f, err := w.open()
	if err != nil {
		return fmt.Errorf("reopening log file: %w", err)
	}
	w.f, w.size = f, 0
	return nil
}

// Close flushes partial lines (tagged P) and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, stream := range []string{"stdout", "stderr"} {
		if buf := w.partial[stream]; len(buf) > 0 {
			_ = w.writeLine(stream, 'P', buf)
		}
	}
	w.partial = map[string][]byte{}
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
