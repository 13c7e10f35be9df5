package job

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// podWrite is one create or patch of a pod as the controller's client saw
// it on the wire.
type podWrite struct {
	method, accept, contentType string
	status                      int
	body                        []byte
}

// podWriteRecorder records the pod creates and patches of one namespace.
type podWriteRecorder struct {
	prefix string
	mu     sync.Mutex
	writes []podWrite
}

func (r *podWriteRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || (req.Method != http.MethodPost && req.Method != http.MethodPatch) || !strings.HasPrefix(req.URL.Path, r.prefix) {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		r.writes = append(r.writes, podWrite{method: req.Method, accept: req.Header.Get("Accept"),
			contentType: resp.Header.Get("Content-Type"), status: resp.StatusCode, body: body})
		r.mu.Unlock()
		return resp, nil
	})
}

func (r *podWriteRecorder) recorded() []podWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]podWrite(nil), r.writes...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// protobufMagic starts every Kubernetes protobuf body.
var protobufMagic = []byte("k8s\x00")

// answeredKind returns the apiVersion and kind of a response body in
// either encoding, and whether the object carries a spec.
func answeredKind(t *testing.T, w podWrite) (apiVersion, kind string, hasSpec bool) {
	t.Helper()
	if bytes.HasPrefix(w.body, protobufMagic) {
		u := &runtime.Unknown{}
		if err := u.Unmarshal(w.body[len(protobufMagic):]); err != nil {
			t.Fatalf("%s answer: %v", w.method, err)
		}
		// Read as a pod, the answer has a spec only if it carries one.
		p := &corev1.Pod{}
		if err := p.Unmarshal(u.Raw); err != nil {
			t.Fatalf("%s answer: %v", w.method, err)
		}
		return u.APIVersion, u.Kind, len(p.Spec.Containers) != 0
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(w.body, &obj); err != nil {
		t.Fatalf("%s answer %q: %v", w.method, w.body, err)
	}
	_, hasSpec = obj["spec"]
	var tm metav1.TypeMeta
	if err := json.Unmarshal(w.body, &tm); err != nil {
		t.Fatal(err)
	}
	return tm.APIVersion, tm.Kind, hasSpec
}

// TestPodWritesAnswerMetadataOnly: the apiserver answers the controller's
// pod creates and patches (tracking finalizer removals) with the pods'
// metadata only, in the encoding the client was configured with, and a
// refused create still comes back as the API error (LimitRanger's refusal
// in the FailedCreate event, not an undecodable answer).
func TestPodWritesAnswerMetadataOnly(t *testing.T) {
	for _, contentType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(contentType, func(t *testing.T) {
			ctx := context.Background()
			ns := framework.CreateNamespace(t)
			c := framework.Client(t)
			rec := &podWriteRecorder{prefix: "/api/v1/namespaces/" + ns + "/pods"}
			startControllerWithConfig(t, testOptions(), func(cfg *rest.Config) {
				cfg.ContentType = contentType
				cfg.AcceptContentTypes = contentType
				cfg.Wrap(rec.wrap)
			})
			job := createJob(t, c, builder.MakeJob("meta", ns).Parallelism(2).Completions(2).ManagedBy(jobcontroller.DefaultManagedBy).Obj())
			framework.WaitForActivePods(t, c, job, 2)
			framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
			framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
			framework.WaitForNoFinalizer(t, c, job)

			methods := sets.New[string]()
			for _, w := range rec.recorded() {
				if w.status != http.StatusCreated && w.status != http.StatusOK {
					t.Errorf("%s answered %d: %s", w.method, w.status, w.body)
					continue
				}
				methods.Insert(w.method)
				wantAccept := contentType + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1," + contentType
				if w.accept != wantAccept {
					t.Errorf("%s sent Accept %q, want %q", w.method, w.accept, wantAccept)
				}
				mediaType, _, err := mime.ParseMediaType(w.contentType)
				if err != nil || mediaType != contentType {
					t.Errorf("%s answered in %q, want %s", w.method, w.contentType, contentType)
				}
				apiVersion, kind, hasSpec := answeredKind(t, w)
				if apiVersion != "meta.k8s.io/v1" || kind != "PartialObjectMetadata" || hasSpec {
					t.Errorf("%s answered %s %s (spec: %v), want meta.k8s.io/v1 PartialObjectMetadata without spec", w.method, apiVersion, kind, hasSpec)
				}
			}
			if !methods.Has(http.MethodPost) || !methods.Has(http.MethodPatch) {
				t.Errorf("writes seen %v, want creates and patches", sets.List(methods))
			}

			// A refused create decodes as the apiserver's error: LimitRanger
			// forbids a pod without a memory limit (a Pod limit has no default).
			limits := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "max-memory", Namespace: ns},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypePod,
					Max: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}}}}
			if _, err := c.CoreV1().LimitRanges(ns).Create(ctx, limits, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			refused := createJob(t, c, builder.MakeJob("refused", ns).ManagedBy(jobcontroller.DefaultManagedBy).Obj())
			framework.WaitFor(t, "a FailedCreate event with the apiserver's refusal", func(ctx context.Context) (bool, error) {
				events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for _, e := range events.Items {
					if e.InvolvedObject.UID == refused.UID && e.Reason == jobcontroller.ReasonFailedCreate {
						if !strings.Contains(e.Message, "is forbidden: maximum memory usage per Pod is 1Mi") {
							t.Fatalf("FailedCreate event %q: want the apiserver's refusal", e.Message)
						}
						return true, nil
					}
				}
				return false, nil
			})
		})
	}
}
