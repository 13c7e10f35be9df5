package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestDecideFinish(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	running := batchv1.JobStatus{StartTime: &started}
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", ns).Selector("u").Parallelism(2).Completions(4).BackoffLimit(2).Status(running)
	}
	withCond := func(w *builder.JobWrapper, ct batchv1.JobConditionType, reason string) *batchv1.Job {
		return w.Condition(ct, reason, metav1.NewTime(t0.Add(-time.Second))).Obj()
	}
	failedPod := func(job *batchv1.Job, code int32) *corev1.Pod {
		return builder.MakePod("f", ns).UID("f").OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).
			ContainerExited("main", code).Phase(corev1.PodFailed).Obj()
	}
	pfp := base().PodFailurePolicy(builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
	cases := map[string]struct {
		job        *batchv1.Job
		pods       func(job *batchv1.Job) []*corev1.Pod
		counts     finishCounts
		want       string // "Type/Reason", "" for none
		wantDeadln time.Duration
	}{
		"nothing decided":                 {job: base().Obj()},
		"earlier SuccessCriteriaMet wins": {job: withCond(base(), batchv1.JobSuccessCriteriaMet, "CompletionsReached"), counts: finishCounts{failed: 99}, want: "SuccessCriteriaMet/CompletionsReached"},
		"earlier FailureTarget kept":      {job: withCond(base(), batchv1.JobFailureTarget, "DeadlineExceeded"), want: "FailureTarget/DeadlineExceeded"},
		"FailJob rule before backoffLimit": {
			job: pfp, pods: func(j *batchv1.Job) []*corev1.Pod { return []*corev1.Pod{failedPod(j, 3)} },
			counts: finishCounts{failed: 99}, want: "FailureTarget/PodFailurePolicy",
		},
		"backoffLimit exceeded":            {job: base().Obj(), counts: finishCounts{failed: 3}, want: "FailureTarget/BackoffLimitExceeded"},
		"backoffLimit reached only":        {job: base().Obj(), counts: finishCounts{failed: 2}},
		"deadline passed":                  {job: base().ActiveDeadlineSeconds(30).Obj(), want: "FailureTarget/DeadlineExceeded"},
		"deadline running":                 {job: base().ActiveDeadlineSeconds(90).Obj(), wantDeadln: 30 * time.Second},
		"deadline stopped while suspended": {job: base().ActiveDeadlineSeconds(30).Suspend(true).Obj()},
		"too many failed indexes": {
			job:    base().Indexed().BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj(),
			counts: finishCounts{failedIndexes: &indexSet{{0, 1}}},
			want:   "FailureTarget/MaxFailedIndexesExceeded",
		},
		"every index finished, one failed": {
			job:    base().Indexed().BackoffLimitPerIndex(0).Obj(),
			counts: finishCounts{failedIndexes: &indexSet{{0, 0}}, succeededIndexes: indexSet{{1, 3}}},
			want:   "FailureTarget/FailedIndexes",
		},
		"success policy": {
			job:    base().Indexed().SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			counts: finishCounts{succeededIndexes: indexSet{{0, 0}}},
			want:   "SuccessCriteriaMet/SuccessPolicy",
		},
		"a failure beats the success policy": {
			job:    base().Indexed().SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			counts: finishCounts{failed: 3, succeededIndexes: indexSet{{0, 0}}},
			want:   "FailureTarget/BackoffLimitExceeded",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var pods []*corev1.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			d := decideFinish(tc.job, pods, tc.counts, t0)
			got := ""
			if d.interim != nil {
				got = string(d.interim.Type) + "/" + d.interim.Reason
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("interim (-want +got):\n%s", diff)
			}
			if d.deadlineIn != tc.wantDeadln {
				t.Errorf("deadlineIn %v, want %v", d.deadlineIn, tc.wantDeadln)
			}
		})
	}
}
