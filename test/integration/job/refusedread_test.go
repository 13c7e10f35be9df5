package job

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// refusingPodReads is a transport standing for a role without pods "get"
// (403 on every read of one pod) in front of an apiserver whose answer to
// the first pod create is lost after the create was applied.
type refusingPodReads struct {
	// next sends the requests that are let through.
	next http.RoundTripper
	// lostCreates counts the creates answered with a 500 after they were applied.
	lostCreates *atomic.Int32
	// refused counts the pod reads answered with a 403.
	refused *atomic.Int32
}

func (r refusingPodReads) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	podsAt := strings.Index(path, "/pods/")
	if req.Method == http.MethodGet && podsAt >= 0 && !strings.Contains(path[podsAt+len("/pods/"):], "/") && req.URL.Query().Get("watch") == "" {
		r.refused.Add(1)
		return statusResponse(req, http.StatusForbidden, "Forbidden", `pods is forbidden: User "test" cannot get resource "pods"`), nil
	}
	resp, err := r.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost && strings.HasSuffix(path, "/pods") && resp.StatusCode == http.StatusCreated && r.lostCreates.CompareAndSwap(0, 1) {
		resp.Body.Close()
		return statusResponse(req, http.StatusInternalServerError, "InternalError", "the answer was lost"), nil
	}
	return resp, err
}

// statusResponse is an apiserver Status answer.
func statusResponse(req *http.Request, code int, reason, msg string) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"` + msg + `","reason":"` + reason + `","code":` + strconv.Itoa(code) + `}`
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewBufferString(body)), Request: req, ProtoMajor: 1, ProtoMinor: 1}
}

// TestRefusedPodReadIsASyncError: under a role that may not read a pod, the
// read that resolves a create whose answer was lost is refused. The Job
// still completes exactly, with no extra pod, and the refusal shows in
// job_controller_job_syncs_total{result="error"}, as a wedge or a silent
// fallback would not.
func TestRefusedPodReadIsASyncError(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	reg := prometheus.NewRegistry()
	opts := testOptions()
	opts.Registerer = reg
	var lost, refused atomic.Int32
	startControllerWithTransport(t, opts, func(rt http.RoundTripper) http.RoundTripper {
		return refusingPodReads{next: rt, lostCreates: &lost, refused: &refused}
	})
	job := createJob(t, c, builder.MakeJob("refused", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(3).Completions(3).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
	framework.SetJobPodsPhase(context.Background(), t, c, job, corev1.PodSucceeded, 3)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 3})
	framework.WaitForNoFinalizer(t, c, job)
	pods, err := framework.JobPods(context.Background(), c, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 {
		t.Errorf("%d pods for 3 completions, want 3 (the create whose answer was lost was found)", len(pods))
	}
	if lost.Load() != 1 || refused.Load() == 0 {
		t.Fatalf("lost creates %d, refused reads %d: the scenario did not happen", lost.Load(), refused.Load())
	}
	errs := syncErrors(t, reg)
	if errs < 1 {
		t.Errorf("job_controller_job_syncs_total{result=\"error\"} = %v after %d refused reads, want >= 1", errs, refused.Load())
	}
}

// syncErrors sums job_controller_job_syncs_total{result="error"} in reg.
func syncErrors(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "job_controller_job_syncs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "error" {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
