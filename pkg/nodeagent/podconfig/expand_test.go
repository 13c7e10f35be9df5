package podconfig

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	cases := map[string]struct {
		in, want string
	}{
		"plain":           {in: "echo hi", want: "echo hi"},
		"reference":       {in: "x$(A)y", want: "x1y"},
		"two":             {in: "$(A)$(B)", want: "1two"},
		"escaped":         {in: "$$(A)", want: "$(A)"},
		"unknown kept":    {in: "$(C)", want: "$(C)"},
		"unterminated":    {in: "a$(A", want: "a$(A"},
		"shell variable":  {in: "echo $JOB_COMPLETION_INDEX", want: "echo $JOB_COMPLETION_INDEX"},
		"trailing dollar": {in: "a$", want: "a$"},
		"empty name":      {in: "$()", want: "$()"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Expand(tc.in, lookup); got != tc.want {
				t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
