package manager

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// stored returns the probe Job as an apiserver with the given changes
// would store it.
func stored(drop ...func(*batchv1.Job)) *batchv1.Job {
	j := probeJob("jobkeeper", DefaultManagedBy)
	j.Name = "jobkeeper-server-check-x7k2q"
	for _, d := range drop {
		d(j)
	}
	return j
}

// Ways an apiserver with a gate off stores the probe.
var (
	noManagedBy            = func(j *batchv1.Job) { j.Spec.ManagedBy = nil }
	noPodReplacementPolicy = func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = nil }
	noSuccessPolicy        = func(j *batchv1.Job) { j.Spec.SuccessPolicy = nil }
	noBackoffLimitPerIndex = func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = nil }
)

func TestServerProblems(t *testing.T) {
	v := func(git, major, minor string) *version.Info {
		return &version.Info{GitVersion: git, Major: major, Minor: minor}
	}
	for name, tc := range map[string]struct {
		facts serverFacts
		// want holds, per expected problem, words it must contain.
		want [][]string
	}{
		"v1.36 keeps every field": {
			facts: serverFacts{version: v("v1.36.3", "1", "36"), stored: stored()},
		},
		"v1.32 with the defaults": {
			facts: serverFacts{version: v("v1.32.0", "1", "32"), stored: stored()},
		},
		"a vendor's v1.33": {
			facts: serverFacts{version: v("v1.33.5-gke.1201000", "1", "33+"), stored: stored()},
		},
		"v1.31, where JobManagedBy is alpha": {
			facts: serverFacts{version: v("v1.31.4", "1", "31"), stored: stored(noManagedBy)},
			want: [][]string{
				{"kube-apiserver v1.31.4", "older than Kubernetes 1.32", "upgrade", "--controllers=ttl-after-finished"},
				{"kube-apiserver v1.31.4", "drops spec.managedBy", "JobManagedBy is off", "--feature-gates=JobManagedBy=true", "kube-controller-manager"},
			},
		},
		"v1.32 with JobManagedBy turned off": {
			facts: serverFacts{version: v("v1.32.2", "1", "32"), stored: stored(noManagedBy)},
			want: [][]string{
				{"kube-apiserver v1.32.2 drops spec.managedBy", "JobManagedBy", "SuccessCriteriaMet", "--feature-gates=JobManagedBy=true"},
			},
		},
		"v1.32 with JobPodReplacementPolicy turned off": {
			facts: serverFacts{version: v("v1.32.2", "1", "32"), stored: stored(noPodReplacementPolicy)},
			want: [][]string{
				{"drops spec.podReplacementPolicy", "JobPodReplacementPolicy is off", "--feature-gates=JobPodReplacementPolicy=true"},
			},
		},
		"v1.32 with JobSuccessPolicy and JobBackoffLimitPerIndex turned off": {
			facts: serverFacts{version: v("v1.32.2", "1", "32"), stored: stored(noSuccessPolicy, noBackoffLimitPerIndex)},
			want: [][]string{
				{"drops spec.successPolicy", "JobSuccessPolicy"},
				{"drops spec.backoffLimitPerIndex", "JobBackoffLimitPerIndex"},
			},
		},
		"a placeholder git version, an old minor": {
			facts: serverFacts{version: v("v0.0.0-master+$Format:%H$", "1", "30+"), stored: stored()},
			want:  [][]string{{"older than Kubernetes 1.32"}},
		},
		"no usable version: the stored Job still tells": {
			facts: serverFacts{version: v("unknown", "", ""), stored: stored(noManagedBy)},
			want:  [][]string{{"kube-apiserver drops spec.managedBy"}},
		},
		"WorkloadWithJob on, the API not served": {
			facts: serverFacts{version: v("v1.36.3", "1", "36"), stored: stored(), workloadsMissing: []string{"workloads", "podgroups"}},
			want:  [][]string{{"does not serve scheduling.k8s.io/v1alpha2 workloads and podgroups", "--runtime-config=scheduling.k8s.io/v1alpha2=true", "GenericWorkload=true"}},
		},
		"an admission policy set another managedBy: not a gate": {
			facts: serverFacts{version: v("v1.34.1", "1", "34"), stored: stored(func(j *batchv1.Job) {
				other := "example.com/other"
				j.Spec.ManagedBy = &other
			})},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := serverProblems(tc.facts)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, words := range tc.want {
				for _, w := range words {
					if !strings.Contains(got[i], w) {
						t.Errorf("problem %d %q lacks %q", i, got[i], w)
					}
				}
			}
		})
	}
}

// fakeServer is a fake clientset whose Job creates answer with answers, in
// turn (the last one repeats), and which records the creates.
type fakeServer struct {
	*fake.Clientset
	// creates are the create actions received.
	creates []k8stesting.CreateAction
}

func newFakeServer(gitVersion string, answers ...func(*batchv1.Job) (*batchv1.Job, error)) *fakeServer {
	s := &fakeServer{Clientset: fake.NewClientset()}
	s.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: gitVersion}
	s.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		create := a.(k8stesting.CreateAction)
		s.creates = append(s.creates, create)
		answer := answers[min(len(s.creates), len(answers))-1]
		j, err := answer(create.GetObject().(*batchv1.Job).DeepCopy())
		return true, j, err
	})
	return s
}

// noWait retries at once: the tests never sleep.
var noWait = wait.Backoff{Steps: 3}

func keep(j *batchv1.Job) (*batchv1.Job, error) { return j, nil }

func TestCheckServerPasses(t *testing.T) {
	s := newFakeServer("v1.36.3", keep)
	if err := checkServer(context.Background(), s, "jobkeeper", "example.com/jk", noWait); err != nil {
		t.Fatalf("checkServer: %v", err)
	}
	if len(s.creates) != 1 {
		t.Fatalf("%d creates, want 1", len(s.creates))
	}
	c := s.creates[0]
	opts := c.(k8stesting.CreateActionImpl).GetCreateOptions()
	if len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
		t.Errorf("the probe was created with dryRun %v, want [All]: it must never be stored", opts.DryRun)
	}
	j := c.GetObject().(*batchv1.Job)
	if c.GetNamespace() != "jobkeeper" || j.Spec.ManagedBy == nil || *j.Spec.ManagedBy != "example.com/jk" {
		t.Errorf("probe in namespace %q with managedBy %v, want jobkeeper and example.com/jk", c.GetNamespace(), j.Spec.ManagedBy)
	}
}

func TestCheckServerRefuses(t *testing.T) {
	forbidden := func(*batchv1.Job) (*batchv1.Job, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "", nil)
	}
	unavailable := func(*batchv1.Job) (*batchv1.Job, error) {
		return nil, apierrors.NewServiceUnavailable("etcd is down")
	}
	dropManagedBy := func(j *batchv1.Job) (*batchv1.Job, error) { noManagedBy(j); return j, nil }
	for name, tc := range map[string]struct {
		server      *fakeServer
		wantCreates int
		want        []string
	}{
		"JobManagedBy off": {
			server: newFakeServer("v1.32.3", dropManagedBy), wantCreates: 1,
			want: []string{"kube-apiserver v1.32.3 drops spec.managedBy", "JobManagedBy=true", "--server-check=false"},
		},
		"too old": {
			server: newFakeServer("v1.31.0", dropManagedBy), wantCreates: 1,
			want: []string{"older than Kubernetes 1.32", "drops spec.managedBy"},
		},
		"the create is forbidden: not retried": {
			server: newFakeServer("v1.36.3", forbidden), wantCreates: 1,
			want: []string{"dry-run create of a Job in namespace jobkeeper", "grant create on batch/jobs in jobkeeper", "--server-check=false"},
		},
		"the apiserver stays unavailable": {
			server: newFakeServer("v1.36.3", unavailable), wantCreates: 3,
			want: []string{"etcd is down", "--server-check=false"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkServer(context.Background(), tc.server, "jobkeeper", DefaultManagedBy, noWait)
			if err == nil {
				t.Fatal("checkServer passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if len(tc.server.creates) != tc.wantCreates {
				t.Errorf("%d creates, want %d", len(tc.server.creates), tc.wantCreates)
			}
		})
	}
}

func TestCheckServerRetriesWhatMayPass(t *testing.T) {
	s := newFakeServer("v1.36.3", func(*batchv1.Job) (*batchv1.Job, error) {
		return nil, apierrors.NewTimeoutError("the request timed out", 1)
	}, keep)
	if err := checkServer(context.Background(), s, "jobkeeper", DefaultManagedBy, noWait); err != nil {
		t.Fatalf("checkServer: %v", err)
	}
	if len(s.creates) != 2 {
		t.Errorf("%d creates, want 2 (a timeout, then the answer)", len(s.creates))
	}
}

// TestProbeJobIsRestricted: the probe is dry-run created in the release
// namespace, which the chart labels with the restricted Pod Security
// Standard; a probe that violated it would earn a warning at every start.
func TestProbeJobIsRestricted(t *testing.T) {
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := probeJob("jobkeeper", DefaultManagedBy).Spec.Template
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, r := range evaluator.EvaluatePod(restricted, &tmpl.ObjectMeta, &tmpl.Spec) {
		if !r.Allowed {
			t.Errorf("the probe's pod template violates the restricted standard: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
		}
	}
}
