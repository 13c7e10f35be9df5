package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultProgressTimeout is how long a pull waits for the next byte from
// the registry before it fails: containerd's image_pull_progress_timeout.
const DefaultProgressTimeout = 5 * time.Minute

// stallError: a registry request received no byte for timeout, waiting
// for its response or for the next bytes of its body.
type stallError struct {
	// timeout is how long it waited.
	timeout time.Duration
	// manifest is set for a manifest request.
	manifest bool
	// blob is the digest of a blob request.
	blob string
	// request is "METHOD URL", for requests that are neither.
	request string
}

func (e *stallError) Error() string {
	return fmt.Sprintf("no progress for %v on %s", e.timeout, e.request)
}

// message is the error of a pull of ref that stalled: it names the layer,
// config or manifest being received (img, if known, tells the config blob
// from the layers).
func (e *stallError) message(ref string, img v1.Image) string {
	what := "the manifest"
	switch {
	case e.blob != "":
		what = "layer " + e.blob
		if img != nil {
			if cfg, err := img.ConfigName(); err == nil && cfg.String() == e.blob {
				what = "config " + e.blob
			}
		}
	case !e.manifest:
		what = "the registry's answer to " + e.request
	}
	return fmt.Sprintf("no progress for %v pulling %s of %s", e.timeout, what, ref)
}

// noProgressError rewrites err, the error of a pull of ref, to say what
// stalled if a registry request did; other errors are returned as they
// are.
func noProgressError(err error, ref string, img v1.Image) error {
	var st *stallError
	if err == nil || !errors.As(err, &st) {
		return err
	}
	return wrapError(ErrNoProgress, st, st.message(ref, img))
}

// progressTransport is an http.RoundTripper that fails a request which
// receives nothing for timeout: while waiting for the response, or while
// a read of its body waits (the time the reader spends between reads does
// not count). Its error is a *stallError.
type progressTransport struct {
	// base sends the requests.
	base http.RoundTripper
	// timeout is how long a request may go without receiving a byte.
	timeout time.Duration
}

// RoundTrip sends req under a watchdog that cancels it when it stalls.
func (t *progressTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := &stallError{timeout: t.timeout, request: req.Method + " " + req.URL.Redacted()}
	switch dir, base := path.Split(req.URL.Path); {
	case strings.HasSuffix(dir, "/blobs/"):
		st.blob = base
	case strings.HasSuffix(dir, "/manifests/"):
		st.manifest = true
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.timeout, func() { cancel(st) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if err != nil {
		if context.Cause(ctx) == st {
			err = st
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = &progressBody{rc: resp.Body, ctx: ctx, cancel: cancel, timer: timer, timeout: t.timeout, st: st}
	return resp, nil
}

// progressBody is a response body whose reads fail with st when no byte
// arrives for timeout.
type progressBody struct {
	// rc is the body.
	rc io.ReadCloser
	// ctx is the request's context; cancel ends it, with st when the
	// timer fires.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// timer runs while a read waits.
	timer *time.Timer
	// timeout is how long a read may wait.
	timeout time.Duration
	// st is the error of a stalled read.
	st *stallError
}

// Read reads from the body, cancelling the request if nothing arrives for
// the timeout.
func (b *progressBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && context.Cause(b.ctx) == b.st {
		err = b.st
	}
	return n, err
}

// Close closes the body and ends the request.
func (b *progressBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}
