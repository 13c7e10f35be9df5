package job

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestParseIndexSetAndString(t *testing.T) {
	cases := map[string]struct {
		in        string
		limit     int
		want      indexSet
		wantStr   string
		wantCount int
	}{
		"empty":              {in: "", limit: 5, want: nil, wantStr: ""},
		"single":             {in: "3", limit: 5, want: indexSet{{3, 3}}, wantStr: "3", wantCount: 1},
		"pair is listed":     {in: "1-2", limit: 5, want: indexSet{{1, 2}}, wantStr: "1,2", wantCount: 2},
		"range and singles":  {in: "1,3-5,7", limit: 10, want: indexSet{{1, 1}, {3, 5}, {7, 7}}, wantStr: "1,3-5,7", wantCount: 5},
		"adjacent merge":     {in: "1,2,3,5", limit: 10, want: indexSet{{1, 3}, {5, 5}}, wantStr: "1-3,5", wantCount: 4},
		"above limit cut":    {in: "0-9", limit: 4, want: indexSet{{0, 3}}, wantStr: "0-3", wantCount: 4},
		"above limit drop":   {in: "1,6,8", limit: 5, want: indexSet{{1, 1}}, wantStr: "1", wantCount: 1},
		"corrupt skipped":    {in: "a,2,x-3,4", limit: 9, want: indexSet{{2, 2}, {4, 4}}, wantStr: "2,4", wantCount: 2},
		"unordered repaired": {in: "5,1", limit: 9, want: indexSet{{1, 1}, {5, 5}}, wantStr: "1,5", wantCount: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := parseIndexSet(tc.in, tc.limit)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("parse (-want +got):\n%s", diff)
			}
			if s := got.String(); s != tc.wantStr {
				t.Errorf("String() = %q, want %q", s, tc.wantStr)
			}
			if n := got.count(); n != tc.wantCount {
				t.Errorf("count() = %d, want %d", n, tc.wantCount)
			}
		})
	}
}

func TestIndexSetHasAndWithIndexes(t *testing.T) {
	s := indexSet{{1, 1}, {3, 5}, {9, 9}}
	for ix, want := range map[int]bool{0: false, 1: true, 2: false, 3: true, 4: true, 5: true, 6: false, 9: true, 10: false} {
		if got := s.has(ix); got != want {
			t.Errorf("has(%d) = %v, want %v", ix, got, want)
		}
	}
	if got, want := s.withIndexes([]int{2, 6, 7, 8}).String(), "1-9"; got != want {
		t.Errorf("withIndexes = %q, want %q", got, want)
	}
}

func TestPendingIndexes(t *testing.T) {
	pod := func(ix string) *corev1.Pod { return builder.MakePod("p"+ix, "ns").Index(ix).Obj() }
	cases := map[string]struct {
		succeeded   string
		active      []*corev1.Pod
		n           int
		completions int
		want        []int
	}{
		"all pending":            {n: 3, completions: 5, want: []int{0, 1, 2}},
		"none wanted":            {n: 0, completions: 5, want: nil},
		"skips succeeded":        {succeeded: "0,2-3", n: 3, completions: 6, want: []int{1, 4, 5}},
		"skips active":           {active: []*corev1.Pod{pod("0"), pod("1")}, n: 2, completions: 4, want: []int{2, 3}},
		"bounded by completions": {succeeded: "1", n: 10, completions: 3, want: []int{0, 2}},
		"everything taken":       {succeeded: "0-1", active: []*corev1.Pod{pod("2")}, n: 2, completions: 3, want: []int{}},
		"gaps between":           {succeeded: "1,5", active: []*corev1.Pod{pod("3")}, n: 4, completions: 7, want: []int{0, 2, 4, 6}},
		"active out of range ok": {active: []*corev1.Pod{pod("9")}, n: 2, completions: 2, want: []int{0, 1}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := pendingIndexes(parseIndexSet(tc.succeeded, tc.completions), tc.active, tc.n, tc.completions)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("pendingIndexes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExcessIndexedPods(t *testing.T) {
	p := func(name, ix string, phase corev1.PodPhase) *corev1.Pod {
		w := builder.MakePod(name, "ns").Phase(phase).NodeName("n")
		if ix != "" {
			w.Index(ix)
		}
		return w.Obj()
	}
	active := []*corev1.Pod{
		p("a0", "0", corev1.PodRunning),
		p("b0", "0", corev1.PodPending),
		p("c1", "1", corev1.PodRunning),
		p("noindex", "", corev1.PodRunning),
		p("big", "7", corev1.PodRunning),
	}
	rm, keep := excessIndexedPods(active, 3, nil)
	names := func(ps []*corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"noindex", "big", "b0"}, names(rm)); diff != "" {
		t.Errorf("remove (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a0", "c1"}, names(keep)); diff != "" {
		t.Errorf("keep (-want +got):\n%s", diff)
	}
}

func TestIndexedGenerateName(t *testing.T) {
	long := "a123456789b123456789c123456789d123456789e123456789f123456789"
	cases := map[string]struct {
		job  string
		ix   int
		want string
	}{
		"short": {job: "pi", ix: 3, want: "pi-3-"},
		"long":  {job: long, ix: 12, want: long[:54] + "-12-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := indexedGenerateName(tc.job, tc.ix); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIndexSetMinus(t *testing.T) {
	cases := map[string]struct {
		s, o, want indexSet
	}{
		"empty":           {s: nil, o: indexSet{{1, 2}}, want: nil},
		"nothing removed": {s: indexSet{{0, 3}}, o: nil, want: indexSet{{0, 3}}},
		"middle":          {s: indexSet{{0, 9}}, o: indexSet{{3, 4}}, want: indexSet{{0, 2}, {5, 9}}},
		"edges":           {s: indexSet{{0, 9}}, o: indexSet{{0, 0}, {9, 9}}, want: indexSet{{1, 8}}},
		"spans across":    {s: indexSet{{0, 2}, {5, 7}}, o: indexSet{{2, 5}}, want: indexSet{{0, 1}, {6, 7}}},
		"all":             {s: indexSet{{1, 1}, {3, 3}}, o: indexSet{{0, 5}}, want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.s.minus(tc.o), cmp.AllowUnexported(span{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("minus (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseIndexSetLinear: parsing what the controller writes (ascending
// pieces) must not redo the whole set per piece. Allocations count the
// work deterministically: a set of 10,000 separate indexes parses with a
// handful of slice growths, not one new set per piece.
func TestParseIndexSetLinear(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 10000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(2 * i))
	}
	s := b.String()
	var got indexSet
	allocs := testing.AllocsPerRun(5, func() { got = parseIndexSet(s, 100000) })
	if got.count() != 10000 {
		t.Fatalf("parsed %d indexes, want 10000", got.count())
	}
	if allocs > 50 {
		t.Errorf("parsing 10,000 pieces took %v allocations, want a few dozen at most (linear)", allocs)
	}
}

func TestIndexOutcomes(t *testing.T) {
	job := func(completed, failed string) *batchv1.Job {
		j := builder.MakeJob("j", ns).Selector("u").Indexed().Completions(5).BackoffLimitPerIndex(0).Obj()
		j.Status.CompletedIndexes = completed
		j.Status.FailedIndexes = &failed
		return j
	}
	pod := func(name, ix string, code int32) *corev1.Pod {
		return builder.MakePod(name, ns).UID(name).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).Terminated(code, metav1.NewTime(t0)).Obj()
	}
	cases := map[string]struct {
		job                     *batchv1.Job
		pods                    []*corev1.Pod
		wantSucceeded, wantFail string
	}{
		"apart":                                {job: job("0", "1"), pods: []*corev1.Pod{pod("a", "2", 0), pod("b", "3", 1)}, wantSucceeded: "0,2", wantFail: "1,3"},
		"corrupted status: completed wins":     {job: job("0-2", "1,4"), wantSucceeded: "0-2", wantFail: "4"},
		"late success of a failed index":       {job: job("", "1"), pods: []*corev1.Pod{pod("a", "1", 0)}, wantSucceeded: "", wantFail: "1"},
		"late failure of a completed index":    {job: job("1", ""), pods: []*corev1.Pod{pod("a", "1", 1)}, wantSucceeded: "1", wantFail: ""},
		"success and failure in the same sync": {job: job("", ""), pods: []*corev1.Pod{pod("a", "3", 1), pod("b", "3", 0)}, wantSucceeded: "3", wantFail: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, succeeded, failed := indexOutcomes(tc.job, tc.pods, nil)
			if got := succeeded.String(); got != tc.wantSucceeded {
				t.Errorf("succeeded %q, want %q", got, tc.wantSucceeded)
			}
			if got := failed.String(); got != tc.wantFail {
				t.Errorf("failed %q, want %q", got, tc.wantFail)
			}
		})
	}
}

// TestAddIndexEnvReachesInitContainers checks JOB_COMPLETION_INDEX is set
// in init containers (sidecars included) as in main containers, as
// upstream's addCompletionIndexEnvVariables does, and never duplicated.
func TestAddIndexEnvReachesInitContainers(t *testing.T) {
	spec := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
		Containers:     []corev1.Container{{Name: "main", Env: []corev1.EnvVar{{Name: completionIndexEnv, Value: "set"}}}},
	}
	addIndexEnv(&spec)
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		n := 0
		for _, e := range c.Env {
			if e.Name == completionIndexEnv {
				n++
			}
		}
		if n != 1 {
			t.Errorf("container %s has %d %s variables, want 1", c.Name, n, completionIndexEnv)
		}
	}
}
