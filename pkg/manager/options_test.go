package manager

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	cases := map[string]struct {
		mutate  func(o *Options)
		wantErr string
	}{
		"defaults are valid":       {mutate: func(o *Options) {}},
		"no controllers is valid":  {mutate: func(o *Options) { o.Controllers = nil }},
		"zero qps":                 {mutate: func(o *Options) { o.KubeAPIQPS = 0 }, wantErr: "--kube-api-qps"},
		"zero burst":               {mutate: func(o *Options) { o.KubeAPIBurst = 0 }, wantErr: "--kube-api-burst"},
		"unknown content type":     {mutate: func(o *Options) { o.KubeAPIContentType = "application/yaml" }, wantErr: "--kube-api-content-type"},
		"json content type":        {mutate: func(o *Options) { o.KubeAPIContentType = ContentTypeJSON }},
		"unknown controller":       {mutate: func(o *Options) { o.Controllers = []string{"job", "cronjob"} }, wantErr: `unknown controller "cronjob"`},
		"empty managed-by":         {mutate: func(o *Options) { o.ManagedBy = "" }, wantErr: "--managed-by"},
		"no job workers":           {mutate: func(o *Options) { o.ConcurrentJobSyncs = 0 }, wantErr: "--concurrent-job-syncs"},
		"no ttl workers":           {mutate: func(o *Options) { o.ConcurrentTTLSyncs = 0 }, wantErr: "--concurrent-ttl-syncs"},
		"zero backoff":             {mutate: func(o *Options) { o.PodFailureBackoff = 0 }, wantErr: "--pod-failure-backoff"},
		"max backoff below base":   {mutate: func(o *Options) { o.MaxPodFailureBackoff = time.Second }, wantErr: "--max-pod-failure-backoff"},
		"negative batch period":    {mutate: func(o *Options) { o.SyncBatchPeriod = -time.Second }, wantErr: "--sync-batch-period"},
		"zero batch period is ok":  {mutate: func(o *Options) { o.SyncBatchPeriod = 0 }},
		"zero uncounted cap":       {mutate: func(o *Options) { o.MaxUncountedPods = 0 }, wantErr: "--max-uncounted-pods"},
		"zero create/delete cap":   {mutate: func(o *Options) { o.MaxPodCreateDeletePerSync = 0 }, wantErr: "--max-pod-create-delete-per-sync"},
		"leader election timings":  {mutate: func(o *Options) { o.LeaderElect = true; o.RenewDeadline = o.LeaseDuration }, wantErr: "leader election"},
		"leader election defaults": {mutate: func(o *Options) { o.LeaderElect = true }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewOptionsDefaults(t *testing.T) {
	o := NewOptions()
	if o.KubeAPIQPS != 50 || o.KubeAPIBurst != 100 || o.ConcurrentJobSyncs != 5 || o.ConcurrentTTLSyncs != 5 ||
		o.PodFailureBackoff != 10*time.Second || o.MaxPodFailureBackoff != 10*time.Minute ||
		o.SyncBatchPeriod != time.Second || o.MaxUncountedPods != 500 || o.MaxPodCreateDeletePerSync != 500 || !o.StaleControllerConsistency ||
		o.ManagedBy != DefaultManagedBy || o.ManageUnclaimedJobs || o.LeaderElect ||
		o.KubeAPIContentType != ContentTypeProtobuf {
		t.Errorf("defaults differ from DESIGN.md section 4: %+v", o)
	}
	if !o.Enabled(JobController) || !o.Enabled(TTLAfterFinishedController) {
		t.Errorf("both controllers should be enabled by default")
	}
}
