package crds

import (
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

func TestCRDsDecode(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 {
		t.Fatalf("got %d CRDs, want 1", len(crds))
	}
	crd := crds[0]
	if got, want := crd.Name, v1alpha1.TTLPolicyResource.Resource+"."+v1alpha1.GroupName; got != want {
		t.Errorf("name %q, want %q", got, want)
	}
	if got, want := crd.Spec.Names.Kind, v1alpha1.TTLPolicyKind.Kind; got != want {
		t.Errorf("kind %q, want %q", got, want)
	}
	if got, want := crd.Spec.Versions[0].Name, v1alpha1.SchemeGroupVersion.Version; got != want {
		t.Errorf("version %q, want %q", got, want)
	}
}
