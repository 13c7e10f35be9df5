package job

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// flowRecorder is a rate limiter that records the flow of each request.
type flowRecorder struct {
	flowcontrol.RateLimiter
	mu    sync.Mutex
	flows []string
}

func (f *flowRecorder) Wait(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows = append(f.flows, fairqueue.FlowOf(ctx))
	return nil
}

// TestEventSinkFlow: the event sink's writes reach the client's rate
// limiter as the flow EventFlow, whatever the request.
func TestEventSinkFlow(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"ns"}}`))
	}))
	defer srv.Close()
	limiter := &flowRecorder{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, RateLimiter: limiter})
	if err != nil {
		t.Fatal(err)
	}
	sink := newEventSink(client.CoreV1().Events(""))
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}
	if _, err := sink.Create(event); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := sink.Update(event); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := sink.Patch(event, []byte(`{}`)); err != nil {
		t.Fatalf("Patch: %v", err)
	}
	want := []string{EventFlow, EventFlow, EventFlow}
	if len(limiter.flows) != len(want) {
		t.Fatalf("flows %q, want %q", limiter.flows, want)
	}
	for i := range want {
		if limiter.flows[i] != want[i] {
			t.Errorf("flows %q, want %q", limiter.flows, want)
		}
	}
}
