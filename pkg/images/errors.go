package images

import "errors"

// Errors that callers tell apart with errors.Is.
var (
	// ErrNotFound: no such image in the store, or in the registry.
	ErrNotFound = errors.New("image not found")
	// ErrInvalidName: the reference does not parse as an image name.
	ErrInvalidName = errors.New("invalid image name")
	// ErrUnauthorized: the registry refused the request for lack of (valid) credentials.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrPlatform: the image has no variant for the requested platform.
	ErrPlatform = errors.New("no image for the platform")
	// ErrInUse: a container runs from the image, so it may not be removed.
	ErrInUse = errors.New("image in use")
	// ErrCorrupt: a layer or manifest does not match its digest.
	ErrCorrupt = errors.New("corrupt image content")
	// ErrNoProgress: the registry sent nothing for the pull's progress
	// timeout (PullOptions.ProgressTimeout).
	ErrNoProgress = errors.New("no progress pulling from the registry")
)

// kindError is an error whose message reads on its own (it becomes a
// kubelet event message) and that errors.Is matches to one of the sentinel
// errors above, and to the error that caused it, if any.
type kindError struct {
	msg   string
	kind  error
	cause error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

// newError returns an error reading msg that is kind.
func newError(kind error, msg string) error {
	return &kindError{msg: msg, kind: kind}
}

// wrapError returns an error reading msg that is kind and wraps cause.
func wrapError(kind error, cause error, msg string) error {
	return &kindError{msg: msg, kind: kind, cause: cause}
}
