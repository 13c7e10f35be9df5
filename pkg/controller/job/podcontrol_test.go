package job

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestCreateNameTaken: a generated pod name that is already taken is
// another pod's (creates are never resent), so a fresh name is tried at
// once, without reading the pod that holds the name.
func TestCreateNameTaken(t *testing.T) {
	job := builder.MakeJob("j", "ns").UID("job-uid").Obj()
	client := fake.NewClientset()
	var names []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		names = append(names, p.Name)
		if len(names) == 1 {
			return true, nil, apierrors.NewAlreadyExists(corev1.Resource("pods"), p.Name)
		}
		return false, nil, nil
	})
	pc := &podControl{client: client, recorder: record.NewFakeRecorder(10)}
	got, err := pc.create(context.Background(), job, podTemplate(job), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || names[0] == names[1] || got != names[1] {
		t.Errorf("names tried %v, created %q: want two different names, the second created", names, got)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" {
			t.Errorf("read %s: a taken name needs no read", a.GetResource().Resource)
		}
	}
}

// TestCreateSentOnce runs the create against an HTTP server: a create
// answered with a 5xx and Retry-After (which client-go resends) is sent
// once and reported as an unknown outcome naming the pod; a throttled
// create (429, refused before anything was stored) is resent.
func TestCreateSentOnce(t *testing.T) {
	cases := map[string]struct {
		// answers are the status codes of successive POSTs (201 after them).
		answers []int
		// want
		wantPosts     int
		wantErr       bool
		wantAmbiguous bool
	}{
		"503 with Retry-After: not resent":  {answers: []int{503}, wantPosts: 1, wantErr: true, wantAmbiguous: true},
		"500 with Retry-After: not resent":  {answers: []int{500}, wantPosts: 1, wantErr: true, wantAmbiguous: true},
		"429: resent":                       {answers: []int{429}, wantPosts: 2},
		"403: refused, not resent":          {answers: []int{403}, wantPosts: 1, wantErr: true},
		"409 taken name: another name sent": {answers: []int{409}, wantPosts: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var posts atomic.Int32
			var firstName atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
					http.Error(w, "no", http.StatusMethodNotAllowed)
					return
				}
				n := int(posts.Add(1))
				pod := &corev1.Pod{}
				if err := json.Unmarshal(readAll(t, r), pod); err != nil {
					t.Errorf("decoding the pod: %v", err)
				}
				if n == 1 {
					firstName.Store(pod.Name)
				}
				w.Header().Set("Content-Type", "application/json")
				if n <= len(tc.answers) {
					code := tc.answers[n-1]
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(code)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":` + strconv.Itoa(code) + `,"reason":"` + reasonFor(code) + `","details":{"retryAfterSeconds":0}}`))
					return
				}
				w.WriteHeader(http.StatusCreated)
				pod.ResourceVersion = "5"
				_, _ = w.Write(encodePod(t, pod))
			}))
			defer srv.Close()
			client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			job := builder.MakeJob("j", "ns").UID("job-uid").Obj()
			pc := &podControl{client: client, recorder: record.NewFakeRecorder(10)}
			got, err := pc.create(context.Background(), job, podTemplate(job), "")
			if int(posts.Load()) != tc.wantPosts {
				t.Errorf("%d POSTs, want %d", posts.Load(), tc.wantPosts)
			}
			if (err != nil) != tc.wantErr || ambiguous(err) != tc.wantAmbiguous {
				t.Fatalf("err %v (ambiguous %v), want error %v, ambiguous %v", err, ambiguous(err), tc.wantErr, tc.wantAmbiguous)
			}
			if tc.wantAmbiguous {
				var unknown *unknownOutcomeError
				if !errors.As(err, &unknown) || got != firstName.Load() {
					t.Errorf("err %v names %q: want an unknown outcome naming the pod sent, %v", err, got, firstName.Load())
				}
			}
			if !strings.HasPrefix(got, "j-") {
				t.Errorf("pod name %q, want j-<suffix>", got)
			}
		})
	}
}

// podTemplate is job's pod template with the labels a Job's pods carry.
func podTemplate(job *batchv1.Job) *corev1.PodTemplateSpec {
	tmpl := job.Spec.Template.DeepCopy()
	tmpl.Labels = map[string]string{batchv1.JobNameLabel: job.Name}
	return tmpl
}

func reasonFor(code int) string {
	return map[int]string{403: "Forbidden", 409: "AlreadyExists", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}[code]
}

// readAll reads the request's body.
func readAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading the request: %v", err)
	}
	return b
}

// encodePod is pod as the apiserver answers it, in JSON.
func encodePod(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
