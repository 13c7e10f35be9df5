package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestCreateNameTaken covers pod names the controller generated that are
// already taken: another pod's name is retried with a fresh one, and a
// recent pod of the same Job (possibly this very create, resent by
// client-go) makes the outcome unknown.
func TestCreateNameTaken(t *testing.T) {
	job := builder.MakeJob("j", "ns").UID("job-uid").Obj()
	other := builder.MakeJob("j", "ns").UID("old-job-uid").Obj()
	now := time.Now()
	cases := map[string]struct {
		// taken is the pod found under the first generated name.
		taken         *corev1.Pod
		wantCreates   int
		wantErr       bool
		wantAmbiguous bool
	}{
		"a pod of another Job with the same name": {
			taken:       builder.MakePod("", "ns").OwnedByJob(other).Obj(),
			wantCreates: 2,
		},
		"an old pod of this Job": {
			taken:       withCreation(builder.MakePod("", "ns").OwnedByJob(job).Obj(), now.Add(-time.Minute)),
			wantCreates: 2,
		},
		"a pod of this Job created moments ago: maybe this create": {
			taken:         withCreation(builder.MakePod("", "ns").OwnedByJob(job).Obj(), now),
			wantCreates:   1,
			wantErr:       true,
			wantAmbiguous: true,
		},
		"gone by the time it is read": {
			wantCreates: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			creates := 0
			var firstName string
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				creates++
				p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				if creates > 1 {
					if p.Name == firstName {
						t.Errorf("the taken name %s was tried again", p.Name)
					}
					return false, nil, nil
				}
				firstName = p.Name
				return true, nil, apierrors.NewAlreadyExists(corev1.Resource("pods"), p.Name)
			})
			client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if tc.taken == nil {
					return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), firstName)
				}
				p := tc.taken.DeepCopy()
				p.Name = firstName
				return true, p, nil
			})
			pc := &podControl{client: client, recorder: record.NewFakeRecorder(10)}
			tmpl := job.Spec.Template.DeepCopy()
			tmpl.Labels = map[string]string{batchv1.JobNameLabel: "j"}
			got, err := pc.create(context.Background(), job, tmpl, "")
			if creates != tc.wantCreates {
				t.Errorf("%d creates, want %d", creates, tc.wantCreates)
			}
			if (err != nil) != tc.wantErr || ambiguous(err) != tc.wantAmbiguous {
				t.Fatalf("err %v (ambiguous %v), want error %v, ambiguous %v", err, ambiguous(err), tc.wantErr, tc.wantAmbiguous)
			}
			if !strings.HasPrefix(got, "j-") {
				t.Errorf("pod name %q, want j-<suffix>", got)
			}
			if tc.wantErr && got != firstName {
				t.Errorf("the error names %s, want the taken name %s (the next sync reads it)", got, firstName)
			}
			var unknown *unknownOutcomeError
			if tc.wantErr && (!errors.As(err, &unknown) || !apierrors.IsAlreadyExists(err)) {
				t.Errorf("err %v: want an unknown outcome wrapping AlreadyExists", err)
			}
		})
	}
}

func withCreation(p *corev1.Pod, at time.Time) *corev1.Pod {
	p.CreationTimestamp = metav1.NewTime(at)
	return p
}
