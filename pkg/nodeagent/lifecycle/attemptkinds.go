package lifecycle

import (
	corev1 "k8s.io/api/core/v1"
)

// HookKind is one of a container's two lifecycle hooks.
type HookKind int

const (
	// HookNone: no hook runs.
	HookNone HookKind = iota
	// HookPostStart runs right after the process started; the container
	// is running only once it returned, and killed when it failed.
	HookPostStart
	// HookPreStop runs before the stop signal, within the grace period.
	HookPreStop
)

// AttemptHooks says which lifecycle hooks run for an attempt.
type AttemptHooks struct {
	// PostStart and preStop are true for each hook that runs.
	PostStart, PreStop bool
}

// ProbeKind is one of a container's three probes.
type ProbeKind int

const (
	// ProbeStartup gates the other two: until it succeeds the container
	// is not started; reaching its failure threshold kills the container.
	ProbeStartup ProbeKind = iota
	// ProbeLiveness kills the container when it reaches its failure
	// threshold.
	ProbeLiveness
	// ProbeReadiness decides whether the container is ready.
	ProbeReadiness
)

// AttemptProbes says which probes run against an attempt.
type AttemptProbes struct {
	// Startup, liveness and readiness are true for each probe that runs.
	Startup, Liveness, Readiness bool
}

// afterStart reports whether probes run once the attempt started.
func (p AttemptProbes) afterStart() bool { return p.Liveness || p.Readiness }

// Has reports whether the probe of kind runs.
func (p AttemptProbes) Has(k ProbeKind) bool {
	return [...]bool{p.Startup, p.Liveness, p.Readiness}[k]
}

// String is the hook's name in events and logs.
func (k HookKind) String() string {
	return [...]string{"None", "PostStart", "PreStop"}[k]
}

// Of returns the container's hook of this kind, nil when it has none.
func (k HookKind) Of(c *corev1.Container) *corev1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	switch k {
	case HookPostStart:
		return c.Lifecycle.PostStart
	case HookPreStop:
		return c.Lifecycle.PreStop
	}
	return nil
}

// String is the kubelet's name of the probe in events ("Liveness probe
// failed: ...").
func (k ProbeKind) String() string {
	return [...]string{"Startup", "Liveness", "Readiness"}[k]
}

// Of returns the container's probe of this kind, nil when it has none.
func (k ProbeKind) Of(c *corev1.Container) *corev1.Probe {
	return [...]*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe}[k]
}
