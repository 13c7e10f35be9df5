package job

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// EventFlow is the fair-queue flow (pkg/fairqueue) of the controller's
// event writes. It is not a Job key (those hold a slash), so it never
// shares a Job's turns; the manager gives it a background share, so that
// events, which nobody waits on, do not take the API budget from Jobs.
const EventFlow = "events"

// eventSink is the broadcaster's record.EventSink: it writes events through
// events like client-go's EventSinkImpl, with a context naming EventFlow.
type eventSink struct {
	// ctx is the context of every write: not cancelled, flow EventFlow.
	ctx context.Context
	// events is the client events are written with.
	events typedcorev1.EventInterface
}

var _ record.EventSink = (*eventSink)(nil)

// newEventSink returns an eventSink writing through events. Its writes are
// not cancelled when the controller stops: as with client-go's sink, the
// broadcaster's Shutdown ends them.
func newEventSink(events typedcorev1.EventInterface) *eventSink {
	return &eventSink{ctx: fairqueue.WithFlow(context.Background(), EventFlow), events: events}
}

// Create creates event in its namespace.
func (s *eventSink) Create(event *corev1.Event) (*corev1.Event, error) {
	return s.events.CreateWithEventNamespaceWithContext(s.ctx, event)
}

// Update updates event in its namespace.
func (s *eventSink) Update(event *corev1.Event) (*corev1.Event, error) {
	return s.events.UpdateWithEventNamespaceWithContext(s.ctx, event)
}

// Patch patches event in its namespace with data.
func (s *eventSink) Patch(event *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.events.PatchWithEventNamespaceWithContext(s.ctx, event, data)
}
