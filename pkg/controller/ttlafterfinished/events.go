package ttlafterfinished

// Event reasons recorded on the objects the controller handles.
const (
	// ReasonDeleted: the object was deleted because its TTL expired.
	ReasonDeleted = "TTLExpired"
	// ReasonWouldDelete: a dry-run policy would have deleted the object.
	ReasonWouldDelete = "TTLExpiredDryRun"
	// ReasonInvalidTTL: the TTL annotation could not be parsed.
	ReasonInvalidTTL = "InvalidTTLAnnotation"
	// ReasonFinishTimeUnreadable: the object finished under a policy's rule
	// but its finish time could not be read.
	ReasonFinishTimeUnreadable = "FinishTimeUnreadable"
)

// EventSource is the component name on the controller's events.
const EventSource = "ttl-after-finished-controller"
