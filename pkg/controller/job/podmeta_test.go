package job

import (
	"context"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// metaServer answers pod creates and patches as the apiserver does when
// asked for metadata only: a meta.k8s.io/v1 PartialObjectMetadata, or a
// Status for a refusal, in the client's encoding.
type metaServer struct {
	t           *testing.T
	contentType string
	codecs      serializer.CodecFactory
	mu          sync.Mutex
	// refuse are the Statuses of the next writes' refusals.
	refuse []*metav1.Status
	// accepts are the Accept headers of the requests served.
	accepts []string
}

// refuseNext makes the next write answer status.
func (s *metaServer) refuseNext(status *metav1.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = append(s.refuse, status)
}

func newMetaServer(t *testing.T, contentType string) *metaServer {
	sch := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	return &metaServer{t: t, contentType: contentType, codecs: serializer.NewCodecFactory(sch)}
}

func (s *metaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.accepts = append(s.accepts, r.Header.Get("Accept"))
	var refusal *metav1.Status
	if len(s.refuse) > 0 {
		refusal, s.refuse = s.refuse[0], s.refuse[1:]
	}
	s.mu.Unlock()
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method == http.MethodPost && mt != s.contentType {
		s.t.Errorf("create sent as %q, want %s", r.Header.Get("Content-Type"), s.contentType)
	}
	info, ok := runtime.SerializerInfoForMediaType(s.codecs.SupportedMediaTypes(), s.contentType)
	if !ok {
		s.t.Fatalf("no serializer for %s", s.contentType)
	}
	w.Header().Set("Content-Type", s.contentType)
	if refusal != nil {
		refusal.APIVersion, refusal.Kind, refusal.Status = "v1", "Status", metav1.StatusFailure
		w.WriteHeader(int(refusal.Code))
		if err := s.codecs.EncoderForVersion(info.Serializer, schema.GroupVersion{Version: "v1"}).Encode(refusal, w); err != nil {
			s.t.Error(err)
		}
		return
	}
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", ResourceVersion: "42", UID: "pod-uid"}}
	if r.Method == http.MethodPost {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(readAll(s.t, r), nil, nil)
		if err != nil {
			s.t.Fatalf("decoding the pod: %v", err)
		}
		pod := obj.(*corev1.Pod)
		m.Name, m.OwnerReferences, m.Labels = pod.Name, pod.OwnerReferences, pod.Labels
		w.WriteHeader(http.StatusCreated)
	} else {
		m.Name = r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	}
	if err := s.codecs.EncoderForVersion(info.Serializer, metav1.SchemeGroupVersion).Encode(m, w); err != nil {
		s.t.Error(err)
	}
}

// TestPodWritesMetadataOnly: with a real client, pod creates and patches
// ask for the pod's metadata only in the client's encoding, decode the
// PartialObjectMetadata answer (what the read-your-writes records use is
// there), and decode a refusal into the same API error as the typed client
// would (a taken name, a terminating namespace, a pod gone).
func TestPodWritesMetadataOnly(t *testing.T) {
	for _, contentType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(contentType, func(t *testing.T) {
			ctx := context.Background()
			srv := newMetaServer(t, contentType)
			hs := httptest.NewServer(srv)
			defer hs.Close()
			client, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, ContentConfig: rest.ContentConfig{ContentType: contentType}})
			if err != nil {
				t.Fatal(err)
			}
			var wrote []metav1.Object
			events := record.NewFakeRecorder(10)
			pc := &podControl{client: client, contentType: contentType, recorder: events,
				onWrite: func(o metav1.Object) { wrote = append(wrote, o) }}
			job := builder.MakeJob("j", "ns").UID("job-uid").Obj()

			// A taken name, then a create.
			srv.refuseNext(&metav1.Status{Code: http.StatusConflict, Reason: metav1.StatusReasonAlreadyExists, Message: "taken"})
			name, err := pc.create(ctx, job, podTemplate(job), "")
			if err != nil {
				t.Fatal(err)
			}
			if len(wrote) != 1 || wrote[0].GetName() != name || wrote[0].GetResourceVersion() != "42" ||
				metav1.GetControllerOf(wrote[0]) == nil || metav1.GetControllerOf(wrote[0]).UID != "job-uid" {
				t.Fatalf("create reported %v, want the metadata of %s at resourceVersion 42 controlled by the Job", wrote, name)
			}
			if got := <-events.Events; got != "Normal SuccessfulCreate Created pod: "+name {
				t.Errorf("event %q", got)
			}

			// A terminating namespace: Forbidden with its cause, no event.
			srv.refuseNext(&metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "namespace ns is being terminated",
				Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}}})
			if _, err := pc.create(ctx, job, podTemplate(job), ""); !apierrors.IsForbidden(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				t.Errorf("create in a terminating namespace: %v, want Forbidden with %s", err, corev1.NamespaceTerminatingCause)
			}
			if len(events.Events) != 0 {
				t.Errorf("event %q for a terminating namespace", <-events.Events)
			}

			// A patch, then a patch of a pod gone.
			if err := pc.PatchPod(ctx, "ns", "p", removeFinalizerPatch(builder.MakePod("p", "ns").Obj())); err != nil {
				t.Fatal(err)
			}
			if len(wrote) != 2 || wrote[1].GetName() != "p" || wrote[1].GetResourceVersion() != "42" {
				t.Errorf("patch reported %v, want the metadata of p at resourceVersion 42", wrote[1:])
			}
			srv.refuseNext(&metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: `pods "p" not found`})
			if err := pc.removeFinalizer(ctx, "ns", "p", []byte(`{}`)); !apierrors.IsNotFound(err) || err.Error() != `pods "p" not found` {
				t.Errorf("patch of a pod gone: %v, want NotFound", err)
			}

			want := contentType + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1," + contentType
			srv.mu.Lock()
			defer srv.mu.Unlock()
			for _, got := range srv.accepts {
				if got != want {
					t.Errorf("Accept %q, want %q", got, want)
				}
			}
			if len(srv.accepts) != 5 {
				t.Errorf("%d requests, want 5", len(srv.accepts))
			}
		})
	}
}

// TestPodWriteParams checks that the pod writes' query parameters are the
// ones client-go's VersionedParams gives for the same options, and that the
// options have no field the direct path does not know of.
func TestPodWriteParams(t *testing.T) {
	rc, err := rest.RESTClientFor(&rest.Config{Host: "https://example.invalid", ContentConfig: rest.ContentConfig{
		GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	force := true
	for _, opts := range []metav1.CreateOptions{
		{}, {FieldManager: FieldManager}, {FieldManager: "a b&c"},
		{FieldManager: FieldManager, DryRun: []string{metav1.DryRunAll}}, {FieldValidation: "Strict"}, {DryRun: []string{}},
	} {
		got := createParams(rc.Post().Namespace("ns").Resource("pods"), opts).URL().String()
		want := rc.Post().Namespace("ns").Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).URL().String()
		if got != want {
			t.Errorf("create with %+v: URL %s, VersionedParams gives %s", opts, got, want)
		}
	}
	for _, opts := range []metav1.PatchOptions{
		{}, {FieldManager: FieldManager}, {FieldManager: FieldManager, Force: &force},
		{FieldManager: FieldManager, DryRun: []string{metav1.DryRunAll}}, {FieldValidation: "Warn"},
	} {
		got := patchParams(rc.Patch(types.StrategicMergePatchType).Namespace("ns").Resource("pods").Name("p"), opts).URL().String()
		want := rc.Patch(types.StrategicMergePatchType).Namespace("ns").Resource("pods").Name("p").VersionedParams(&opts, scheme.ParameterCodec).URL().String()
		if got != want {
			t.Errorf("patch with %+v: URL %s, VersionedParams gives %s", opts, got, want)
		}
	}
	// createParams and patchParams look at these fields only: a field added
	// to the options in a later client must be looked at too.
	for typ, known := range map[reflect.Type][]string{
		reflect.TypeOf(metav1.CreateOptions{}): {"TypeMeta", "DryRun", "FieldManager", "FieldValidation"},
		reflect.TypeOf(metav1.PatchOptions{}):  {"TypeMeta", "DryRun", "Force", "FieldManager", "FieldValidation"},
	} {
		var fields []string
		for i := range typ.NumField() {
			fields = append(fields, typ.Field(i).Name)
		}
		if !slices.Equal(fields, known) {
			t.Errorf("%s has fields %v; createParams and patchParams know %v", typ, fields, known)
		}
	}
}
