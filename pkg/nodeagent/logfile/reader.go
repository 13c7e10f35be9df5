package logfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"time"
)

// ReadOptions are the kubelet log options the reader understands.
type ReadOptions struct {
	// Timestamps prefixes every line with its RFC3339Nano timestamp.
	Timestamps bool
	// TailLines, if >= 0, starts that many lines from the end.
	TailLines int64
	// SinceTime drops lines written before it (zero: keep all).
	SinceTime time.Time
	// Stream, when set ("stdout" or "stderr"), keeps that stream's lines
	// only.
	Stream string
	// LimitBytes, if > 0, stops after that many bytes of output.
	LimitBytes int64
	// Follow keeps reading new lines until Running reports false.
	Follow bool
	// Running tells a follower whether the container may still write.
	Running func() bool
	// PollInterval is how often a follower looks for new lines.
	PollInterval time.Duration
}

// record is one parsed log line.
type record struct {
	// ts is the line's timestamp as stored.
	ts []byte
	// at is ts parsed.
	at time.Time
	// full is false for a partial line.
	full bool
	// stream is "stdout" or "stderr".
	stream []byte
	// content is the line without the newline.
	content []byte
}

// parseRecord parses one stored line (without its newline).
func parseRecord(line []byte) (record, bool) {
	fields := bytes.SplitN(line, []byte{' '}, 4)
	if len(fields) < 3 {
		return record{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return record{}, false
	}
	r := record{ts: fields[0], at: at, full: string(fields[2]) != "P", stream: fields[1]}
	if len(fields) == 4 {
		r.content = fields[3]
	}
	return r, true
}

// errLimit stops reading when LimitBytes is reached.
var errLimit = errors.New("log byte limit reached")

// printer writes records to the client honouring the options.
type printer struct {
	// out is the client.
	out io.Writer
	// opts are the options.
	opts ReadOptions
	// written counts bytes written.
	written int64
}

// print writes one record.
func (p *printer) print(r record) error {
	if !p.opts.SinceTime.IsZero() && r.at.Before(p.opts.SinceTime) {
		return nil
	}
	if p.opts.Stream != "" && string(r.stream) != p.opts.Stream {
		return nil
	}
	var b []byte
	if p.opts.Timestamps {
		b = append(b, r.ts...)
		b = append(b, ' ')
	}
	b = append(b, r.content...)
	if r.full {
		b = append(b, '\n')
	}
	if p.opts.LimitBytes > 0 && p.written+int64(len(b)) > p.opts.LimitBytes {
		b = b[:p.opts.LimitBytes-p.written]
		_, _ = p.out.Write(b)
		return errLimit
	}
	n, err := p.out.Write(b)
	p.written += int64(n)
	if f, ok := p.out.(interface{ Flush() }); ok && p.opts.Follow {
		f.Flush()
	}
	return err
}

// readAll returns the parsed records of the rotated file (if any) and the
// current one, and the open current file positioned after what was read.
func readAll(path string) ([]record, *os.File, error) {
	var recs []record
	if data, err := os.ReadFile(path + ".1"); err == nil {
		recs = appendRecords(recs, data)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	// Keep an incomplete last line for the follower to re-read.
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		if _, err := f.Seek(int64(i+1), io.SeekStart); err != nil {
			_ = f.Close()
			return nil, nil, err
		}
		data = data[:i+1]
	}
	return appendRecords(recs, data), f, nil
}

// appendRecords parses every complete line of data.
func appendRecords(recs []record, data []byte) []record {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if r, ok := parseRecord(data[:i]); ok {
			recs = append(recs, r)
		}
		data = data[i+1:]
	}
	return recs
}

// Read writes the log at path to out according to opts. A missing file is
// an empty log.
func Read(ctx context.Context, path string, opts ReadOptions, out io.Writer) error {
	recs, f, err := readAll(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if opts.TailLines >= 0 && int64(len(recs)) > opts.TailLines {
		recs = recs[int64(len(recs))-opts.TailLines:]
	}
	p := &printer{out: out, opts: opts}
	for _, r := range recs {
		if err := p.print(r); err != nil {
			if errors.Is(err, errLimit) {
				return nil
			}
			return err
		}
	}
	if !opts.Follow {
		return nil
	}
	err = follow(ctx, path, f, p)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// follow prints lines appended to f (and to the files that replace it on
// rotation) until the container stops running or ctx is done.
func follow(ctx context.Context, path string, f *os.File, p *printer) error {
	poll := p.opts.PollInterval
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	orig := f
	defer func() {
		if f != orig {
			_ = f.Close()
		}
	}()
	r := bufio.NewReader(f)
	var pending []byte
	drain := func() error {
		for {
			chunk, err := r.ReadBytes('\n')
			pending = append(pending, chunk...)
			if err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			line := bytes.TrimSuffix(pending, []byte{'\n'})
			pending = nil
			if rec, ok := parseRecord(line); ok {
				if err := p.print(rec); err != nil {
					return err
				}
			}
		}
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		if err := drain(); err != nil {
			return err
		}
		// A rotation replaced the file: finish the old one, go on with the new.
		if cur, err := os.Stat(path); err == nil {
			if old, err := f.Stat(); err == nil && !os.SameFile(cur, old) {
				nf, err := os.Open(path)
				if err == nil {
					if f != orig {
						_ = f.Close()
					}
					f = nf
					r.Reset(f)
					pending = nil
					continue
				}
			}
		}
		if p.opts.Running == nil || !p.opts.Running() {
			// One last look: the container may have written before exiting.
			return drain()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
