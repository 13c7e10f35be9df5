package fault

import (
	"context"
	"io"
	"sync"
	"time"
)

// watchStream is one watch open through the proxy.
type watchStream struct {
	// cut is closed when the proxy cuts the stream.
	cut chan struct{}
	// cancel cancels the request to the apiserver.
	cancel context.CancelFunc
	// delay is the WatchDelay when the stream was opened.
	delay time.Duration
}

// streamKey is the context key of the watchStream of a proxied request.
type streamKey struct{}

// chunk is a piece of a watch stream as it arrived from the apiserver, or
// the error that ended the stream.
type chunk struct {
	// data are the bytes read.
	data []byte
	// at is when they were read.
	at time.Time
	// err ends the stream (io.EOF when the apiserver ended it).
	err error
}

// delayLine is the body of a watch response as the client sees it: a
// goroutine (pump) reads the apiserver's body as it arrives and stamps every
// chunk, and Read hands each chunk on no earlier than its stamp plus the
// delay. The reverse proxy flushes the headers at once (as the apiserver
// does) and the body after every Read, so chunks are neither
// merged nor held back beyond the delay. A cut, or the client going away,
// ends the body at once with io.EOF; chunks still in the line are dropped.
type delayLine struct {
	// upstream is the apiserver's response body.
	upstream io.ReadCloser
	// s is the stream the body belongs to.
	s *watchStream
	// ctx is the stream's context, done when the client went away or the
	// stream was cut.
	ctx context.Context
	// mu guards queue.
	mu sync.Mutex
	// queue holds the chunks read and not yet handed on, oldest first.
	queue []chunk
	// ready has a token when queue may have grown.
	ready chan struct{}
	// pending is the rest of a chunk that did not fit the reader's buffer.
	pending []byte
	// closeOnce closes upstream once.
	closeOnce sync.Once
}

// newDelayLine starts the delay line of a watch response body; done is
// called when its goroutine ends.
func newDelayLine(ctx context.Context, upstream io.ReadCloser, s *watchStream, done func()) *delayLine {
	d := &delayLine{upstream: upstream, s: s, ctx: ctx, ready: make(chan struct{}, 1)}
	go func() {
		defer done()
		d.pump()
	}()
	return d
}

// pump reads the apiserver's body into the queue until it ends: when the
// apiserver closes it, or when Close or the stream's cancellation breaks it.
func (d *delayLine) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := d.upstream.Read(buf)
		now := time.Now()
		if n > 0 {
			d.push(chunk{data: append([]byte(nil), buf[:n]...), at: now})
		}
		if err != nil {
			d.push(chunk{err: err, at: now})
			return
		}
	}
}

// push appends c to the queue and wakes Read.
func (d *delayLine) push(c chunk) {
	d.mu.Lock()
	d.queue = append(d.queue, c)
	d.mu.Unlock()
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

// next returns the oldest chunk, waiting for one; false if the stream was
// cut or its client went away first.
func (d *delayLine) next() (chunk, bool) {
	for {
		d.mu.Lock()
		if len(d.queue) > 0 {
			c := d.queue[0]
			d.queue[0] = chunk{}
			d.queue = d.queue[1:]
			d.mu.Unlock()
			return c, true
		}
		d.mu.Unlock()
		select {
		case <-d.ready:
		case <-d.s.cut:
			return chunk{}, false
		case <-d.ctx.Done():
			return chunk{}, false
		}
	}
}

// ended tells whether the stream was cut or its client went away.
func (d *delayLine) ended() bool {
	select {
	case <-d.s.cut:
		return true
	case <-d.ctx.Done():
		return true
	default:
		return false
	}
}

// Read hands on the next chunk once its delay has passed.
func (d *delayLine) Read(b []byte) (int, error) {
	if d.ended() {
		return 0, io.EOF
	}
	if len(d.pending) > 0 {
		n := copy(b, d.pending)
		d.pending = d.pending[n:]
		return n, nil
	}
	c, ok := d.next()
	if !ok {
		return 0, io.EOF
	}
	if wait := time.Until(c.at.Add(d.s.delay)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.s.cut:
			t.Stop()
			return 0, io.EOF
		case <-d.ctx.Done():
			t.Stop()
			return 0, io.EOF
		}
	}
	if c.err != nil {
		if c.err == io.EOF || d.ended() {
			return 0, io.EOF
		}
		return 0, c.err
	}
	n := copy(b, c.data)
	d.pending = c.data[n:]
	return n, nil
}

// Close cancels the request to the apiserver and closes its body, which
// ends pump.
func (d *delayLine) Close() error {
	d.closeOnce.Do(func() {
		d.s.cancel()
		d.upstream.Close()
	})
	return nil
}
