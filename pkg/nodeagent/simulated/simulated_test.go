package simulated

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func TestParseInstructions(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		want        Instructions
		wantErr     bool
	}{
		"defaults":        {want: Instructions{}},
		"both":            {annotations: map[string]string{DurationAnnotation: "1m30s", ExitCodeAnnotation: "42"}, want: Instructions{Duration: 90 * time.Second, ExitCode: 42}},
		"bad duration":    {annotations: map[string]string{DurationAnnotation: "soon"}, wantErr: true},
		"negative":        {annotations: map[string]string{DurationAnnotation: "-1s"}, wantErr: true},
		"exit code range": {annotations: map[string]string{ExitCodeAnnotation: "256"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseInstructions(tc.annotations)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseInstructions() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); err == nil && diff != "" {
				t.Errorf("instructions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInstantSuccess(t *testing.T) {
	rt := New(testingclock.NewFakeClock(t0))
	h, err := rt.Start(context.Background(), runtime.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("a container without duration must end at once")
	}
	want := runtime.Result{ExitCode: 0, Reason: "Completed", StartedAt: t0, FinishedAt: t0}
	if diff := cmp.Diff(want, h.Result()); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestDurationAndExitCode(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	rt := New(clk)
	h, err := rt.Start(context.Background(), runtime.Spec{Annotations: map[string]string{DurationAnnotation: "30s", ExitCodeAnnotation: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(29 * time.Second)
	select {
	case <-h.Done():
		t.Fatal("ended before its duration")
	default:
	}
	clk.Step(time.Second)
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("did not end after its duration")
	}
	want := runtime.Result{ExitCode: 2, Reason: "Error", StartedAt: t0, FinishedAt: t0.Add(30 * time.Second)}
	if diff := cmp.Diff(want, h.Result()); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestStop(t *testing.T) {
	for name, tc := range map[string]struct {
		grace time.Duration
		want  int32
	}{"graceful": {grace: time.Second, want: 143}, "forced": {grace: 0, want: 137}} {
		t.Run(name, func(t *testing.T) {
			rt := New(testingclock.NewFakeClock(t0))
			h, err := rt.Start(context.Background(), runtime.Spec{Annotations: map[string]string{DurationAnnotation: "1h"}})
			if err != nil {
				t.Fatal(err)
			}
			h.Stop(tc.grace)
			<-h.Done()
			if got := h.Result().ExitCode; got != tc.want {
				t.Errorf("exit code = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestInvalidAnnotationIsAStartError(t *testing.T) {
	_, err := New(nil).Start(context.Background(), runtime.Spec{Annotations: map[string]string{ExitCodeAnnotation: "x"}})
	var se *runtime.StartError
	if !errors.As(err, &se) {
		t.Errorf("Start() error = %v, want a StartError", err)
	}
}
