package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestFocusSelectsExactlyOneSpec(t *testing.T) {
	suite := "Kubernetes e2e suite"
	a := specReport{ContainerHierarchyTexts: []string{"[sig-apps] Job"}, LeafNodeText: "should delete a job [Conformance]"}
	b := specReport{ContainerHierarchyTexts: []string{"[sig-apps] Job"}, LeafNodeText: "should delete a job [Conformance] twice"}
	re := regexp.MustCompile(focus(suite, a))
	// ginkgo matches the focus against the description, a space and the full text.
	if !re.MatchString(suite + " " + a.fullText()) {
		t.Errorf("%s does not match its own spec", re)
	}
	if re.MatchString(suite + " " + b.fullText()) {
		t.Errorf("%s matches another spec", re)
	}
}

func TestWriteDocKeepsHandWrittenText(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "c.md")
	if err := os.WriteFile(doc, []byte("# T\n\nintro\n\n"+beginMarker+"\nold\n"+endMarker+"\n\n## Analysis\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeDoc(doc, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(doc)
	want := "# T\n\nintro\n\n" + beginMarker + "\nnew\n" + endMarker + "\n\n## Analysis\nkept\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestFirstLines(t *testing.T) {
	got := firstLines("\n  first  \n\nsecond\nthird\n", 2)
	if got != "first / second" {
		t.Errorf("got %q", got)
	}
	if long := firstLines(strings.Repeat("x", 500), 1); len(long) > 250 {
		t.Errorf("not shortened: %d bytes", len(long))
	}
}
