package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// TestUpControllersFlag checks that `up --controllers=` selects none of
// jobkeeper's controllers and is valid, and what the banner then says.
func TestUpControllersFlag(t *testing.T) {
	cases := map[string]struct {
		args       []string
		want       []string
		wantBanner string
	}{
		"default":     {want: []string{manager.JobController, manager.TTLAfterFinishedController}},
		"empty":       {args: []string{"--controllers="}, want: []string{}, wantBanner: "None of jobkeeper's controllers run (--controllers=)"},
		"only ttl":    {args: []string{"--controllers=ttl-after-finished"}, want: []string{manager.TTLAfterFinishedController}, wantBanner: "jobkeeper's controllers running: ttl-after-finished"},
		"both, order": {args: []string{"--controllers=ttl-after-finished,job"}, want: []string{manager.TTLAfterFinishedController, manager.JobController}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := newUpCommand()
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			opts := manager.NewOptions()
			got, err := cmd.Flags().GetStringSlice("controllers")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("controllers (-want +got):\n%s", diff)
			}
			opts.Controllers = got
			if err := opts.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			banner := controllersBanner(got)
			if (tc.wantBanner == "") != (banner == "") || !strings.HasPrefix(banner, tc.wantBanner) {
				t.Errorf("banner %q, want one starting %q", banner, tc.wantBanner)
			}
		})
	}
}
