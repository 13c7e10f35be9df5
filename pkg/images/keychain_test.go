package images

import (
	"encoding/base64"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
)

func TestSecretsKeychain(t *testing.T) {
	configJSON := &corev1.Secret{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{
			"https://index.docker.io/v1/": {"username": "hub", "password": "h"},
			"registry.example.com": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("whole:w")) + `"},
			"registry.example.com/team": {"username": "team", "password": "t"},
			"registry.example.com:5000": {"username": "port", "password": "p"},
			"*.glob.example.com": {"username": "glob", "password": "g"}
		}}`)},
	}
	dockercfg := &corev1.Secret{
		Type: corev1.SecretTypeDockercfg,
		Data: map[string][]byte{corev1.DockerConfigKey: []byte(`{"old.example.com": {"username": "old", "password": "o"}}`)},
	}
	opaque := &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("y")}}
	kc := SecretsKeychain([]*corev1.Secret{opaque, configJSON, dockercfg, nil})
	cases := map[string]string{
		"busybox":                           "hub",
		"docker.io/user/app":                "hub",
		"registry.example.com/app":          "whole",
		"registry.example.com/team/app":     "team",
		"registry.example.com/teamster/app": "team", // the kubelet's path match is a string prefix
		"registry.example.com:5000/app":     "port",
		"a.glob.example.com/app":            "glob",
		"a.b.glob.example.com/app":          "",
		"old.example.com/app":               "old",
		"elsewhere.example.com/app":         "",
	}
	for ref, wantUser := range cases {
		t.Run(ref, func(t *testing.T) {
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			a, err := kc.Resolve(r.Context())
			if err != nil {
				t.Fatal(err)
			}
			if wantUser == "" {
				if a != authn.Anonymous {
					t.Errorf("Resolve(%s) gave credentials, want anonymous", ref)
				}
				return
			}
			cfg, err := a.Authorization()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Username != wantUser {
				t.Errorf("Resolve(%s) user %q, want %q", ref, cfg.Username, wantUser)
			}
		})
	}
}
