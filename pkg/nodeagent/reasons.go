package nodeagent

import (
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// The reasons (and messages) of the events and statuses the agent writes, which callers
// match on. Each is owned by the package that decides it; they are named
// here too so that callers need only this package.
const (
	// ReasonPodFeatureUnsupported: podconfig.ReasonPodFeatureUnsupported.
	ReasonPodFeatureUnsupported = podconfig.ReasonPodFeatureUnsupported
	// ReasonAppArmor: podconfig.ReasonAppArmor.
	ReasonAppArmor = podconfig.ReasonAppArmor
	// ReasonSysctlForbidden: podconfig.ReasonSysctlForbidden.
	ReasonSysctlForbidden = podconfig.ReasonSysctlForbidden
	// ReasonNotEnforced: podconfig.ReasonNotEnforced.
	ReasonNotEnforced = podconfig.ReasonNotEnforced
	// ReasonInvalidDNSConfig: podconfig.ReasonInvalidDNSConfig.
	ReasonInvalidDNSConfig = podconfig.ReasonInvalidDNSConfig
	// ReasonCreateContainerError: podconfig.ReasonCreateContainerError.
	ReasonCreateContainerError = podconfig.ReasonCreateContainerError
	// ReasonUnsupportedVolume: volume.ReasonUnsupportedVolume.
	ReasonUnsupportedVolume = volume.ReasonUnsupportedVolume
	// ReasonNoPrivateFilesystem: volume.ReasonNoPrivateFilesystem.
	ReasonNoPrivateFilesystem = volume.ReasonNoPrivateFilesystem
	// ReasonUnschedulable: binder.ReasonUnschedulable.
	ReasonUnschedulable = binder.ReasonUnschedulable
	// ReasonFailedPostStartHook: lifecycle.ReasonFailedPostStartHook.
	ReasonFailedPostStartHook = lifecycle.ReasonFailedPostStartHook
	// ReasonFailedPreStopHook: lifecycle.ReasonFailedPreStopHook.
	ReasonFailedPreStopHook = lifecycle.ReasonFailedPreStopHook
	// ReasonPostStartHookError: lifecycle.ReasonPostStartHookError.
	ReasonPostStartHookError = lifecycle.ReasonPostStartHookError
	// ReasonLifecycleHTTPFallback: lifecycle.ReasonLifecycleHTTPFallback.
	ReasonLifecycleHTTPFallback = lifecycle.ReasonLifecycleHTTPFallback
	// ReasonHookNotSupported: lifecycle.ReasonHookNotSupported.
	ReasonHookNotSupported = lifecycle.ReasonHookNotSupported
	// ReasonDeadlineExceeded: lifecycle.ReasonDeadlineExceeded.
	ReasonDeadlineExceeded = lifecycle.ReasonDeadlineExceeded
	// MessageDeadlineExceeded: lifecycle.MessageDeadlineExceeded.
	MessageDeadlineExceeded = lifecycle.MessageDeadlineExceeded
	// ReasonCrashLoopBackOff: lifecycle.ReasonCrashLoopBackOff.
	ReasonCrashLoopBackOff = lifecycle.ReasonCrashLoopBackOff
	// ReasonContainerCreating: lifecycle.ReasonContainerCreating.
	ReasonContainerCreating = lifecycle.ReasonContainerCreating
	// ReasonPodInitializing: lifecycle.ReasonPodInitializing.
	ReasonPodInitializing = lifecycle.ReasonPodInitializing
	// ReasonCreateContainerConfigError: lifecycle.ReasonCreateContainerConfigError.
	ReasonCreateContainerConfigError = lifecycle.ReasonCreateContainerConfigError
	// ReasonContainerStatusUnknown: lifecycle.ReasonContainerStatusUnknown.
	ReasonContainerStatusUnknown = lifecycle.ReasonContainerStatusUnknown
	// ReasonNodeShutdown: status.ReasonNodeShutdown.
	ReasonNodeShutdown = status.ReasonNodeShutdown
	// MessageNodeShutdown: status.MessageNodeShutdown.
	MessageNodeShutdown = status.MessageNodeShutdown
	// ReasonErrImagePull: imagemanager.ReasonErrImagePull.
	ReasonErrImagePull = imagemanager.ReasonErrImagePull
	// ReasonImagePullBackOff: imagemanager.ReasonImagePullBackOff.
	ReasonImagePullBackOff = imagemanager.ReasonImagePullBackOff
	// ReasonErrImageNeverPull: imagemanager.ReasonErrImageNeverPull.
	ReasonErrImageNeverPull = imagemanager.ReasonErrImageNeverPull
	// ReasonInvalidImageName: imagemanager.ReasonInvalidImageName.
	ReasonInvalidImageName = imagemanager.ReasonInvalidImageName
	// ReasonUnhealthy: prober.ReasonUnhealthy.
	ReasonUnhealthy = prober.ReasonUnhealthy
	// ReasonProbeWarning: prober.ReasonProbeWarning.
	ReasonProbeWarning = prober.ReasonProbeWarning
)

// FieldManager is the field manager of every write the agent makes
// (status.FieldManager).
const FieldManager = status.FieldManager
