package nodeagent

import (
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// The reasons of the events and statuses the agent writes, which callers
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
)

// FieldManager is the field manager of every write the agent makes
// (status.FieldManager).
const FieldManager = status.FieldManager
