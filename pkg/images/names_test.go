package images

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]struct {
		in, want string
		wantErr  string
	}{
		"short name":         {in: "busybox", want: "docker.io/library/busybox:latest"},
		"tag":                {in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		"user repo":          {in: "user/app", want: "docker.io/user/app:latest"},
		"docker.io":          {in: "docker.io/library/busybox:1", want: "docker.io/library/busybox:1"},
		"index.docker.io":    {in: "index.docker.io/library/busybox:1", want: "docker.io/library/busybox:1"},
		"other registry":     {in: "registry.k8s.io/pause:3.9", want: "registry.k8s.io/pause:3.9"},
		"registry with port": {in: "127.0.0.1:5000/a/b:c", want: "127.0.0.1:5000/a/b:c"},
		"digest":             {in: "busybox@" + digest, want: "docker.io/library/busybox@" + digest},
		"tag and digest":     {in: "busybox:1@" + digest, want: "docker.io/library/busybox@" + digest},
		"upper case":         {in: "BusyBox", wantErr: `invalid image name "BusyBox"`},
		"empty":              {in: "", wantErr: `invalid image name "": empty`},
		"space":              {in: " busybox", wantErr: "leading or trailing space"},
		"bad digest":         {in: "busybox@sha256:12", wantErr: `invalid image name "busybox@sha256:12"`},
		"bad tag":            {in: "busybox:-x", wantErr: `invalid image name "busybox:-x"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Normalize(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Normalize(%q) = %q, %v; want an ErrInvalidName containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Normalize(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
