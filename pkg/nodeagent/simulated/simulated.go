package simulated

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Name is the runtime's name for --runtime.
const Name = "simulated"

const (
	// DurationAnnotation holds how long each container runs.
	DurationAnnotation = "jobkeeper.dev/simulate-duration"
	// ExitCodeAnnotation holds the exit code of each container.
	ExitCodeAnnotation = "jobkeeper.dev/simulate-exit-code"
)

// Runtime simulates containers.
type Runtime struct {
	// clock measures durations.
	clock clock.WithTicker
}

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Quiet   = (*Runtime)(nil)
)

// New returns a simulated runtime; a nil clock means the real one.
func New(clk clock.WithTicker) *Runtime {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Runtime{clock: clk}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

// Quiet implements runtime.Quiet: simulated containers record no events.
func (*Runtime) Quiet() {}

// Instructions are what the annotations ask for.
type Instructions struct {
	// Duration is how long each container runs.
	Duration time.Duration
	// ExitCode is how each container exits.
	ExitCode int32
}

// ParseInstructions reads the simulation annotations.
func ParseInstructions(annotations map[string]string) (Instructions, error) {
	var in Instructions
	if v, ok := annotations[DurationAnnotation]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return in, fmt.Errorf("annotation %s=%q is not a non-negative duration", DurationAnnotation, v)
		}
		in.Duration = d
	}
	if v, ok := annotations[ExitCodeAnnotation]; ok {
		c, err := strconv.ParseInt(v, 10, 32)
		if err != nil || c < 0 || c > 255 {
			return in, fmt.Errorf("annotation %s=%q is not an exit code (0-255)", ExitCodeAnnotation, v)
		}
		in.ExitCode = int32(c)
	}
	return in, nil
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(_ context.Context, spec runtime.Spec) (runtime.Handle, error) {
	in, err := ParseInstructions(spec.Annotations)
	if err != nil {
		return nil, &runtime.StartError{Reason: "InvalidSimulation", Message: err.Error()}
	}
	now := r.clock.Now()
	h := &handle{clock: r.clock, done: make(chan struct{}), result: runtime.Result{StartedAt: now}}
	if in.Duration == 0 {
		h.end(in.ExitCode, now)
		return h, nil
	}
	h.timer = r.clock.NewTimer(in.Duration)
	go func() {
		select {
		case <-h.timer.C():
			h.end(in.ExitCode, r.clock.Now())
		case <-h.done:
		}
	}()
	return h, nil
}

// handle is one simulated container.
type handle struct {
	// clock stamps a stop.
	clock clock.PassiveClock
	// timer fires when the container is due to exit.
	timer clock.Timer
	// done is closed when the container has ended.
	done chan struct{}

	// mu guards result and ended.
	mu sync.Mutex
	// result is the outcome.
	result runtime.Result
	// ended is true once done is closed.
	ended bool
}

// end records the exit once.
func (h *handle) end(code int32, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	h.result.ExitCode = code
	h.result.Reason = runtime.ReasonFor(code)
	h.result.FinishedAt = at
	close(h.done)
}

// PID implements runtime.Handle.
func (h *handle) PID() int { return 0 }

// Done implements runtime.Handle.
func (h *handle) Done() <-chan struct{} { return h.done }

// Result implements runtime.Handle.
func (h *handle) Result() runtime.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result
}

// Stop implements runtime.Handle: the container ends at once.
func (h *handle) Stop(grace time.Duration) {
	code := int32(143)
	if grace <= 0 {
		code = 137
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.end(code, h.clock.Now())
}
