package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
)

// TestFlagPlaceholders checks every flag of every command for the value
// placeholder --help shows: pflag takes the first backquoted word of a
// description as the placeholder, so a description that quotes a command
// in backquotes rendered as "--images jobkeeper image load".
func TestFlagPlaceholders(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
				t.Errorf("%s --%s: placeholder %q (a backquoted phrase in its description)", cmd.CommandPath(), f.Name, name)
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

// TestUpHelpImagesMode checks that `up --help` names the default images
// mode as the one pods run in, and the other as the alternative.
func TestUpHelpImagesMode(t *testing.T) {
	cmd := newUpCommand()
	var help bytes.Buffer
	cmd.SetOut(&help)
	if err := cmd.Help(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(help.String()), " ")
	if nodeagent.ImagesOCI != "oci" {
		t.Fatalf("default images mode is %q; update up's help", nodeagent.ImagesOCI)
	}
	for _, want := range []string{
		"By default (--images=oci) each container runs its image",
		"With --images=host a container's command",
		`--images string Where containers get their files`,
		`--keep-running-on-stop On a clean stop`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("up --help does not say %q", want)
		}
	}
	if strings.Contains(text, "the host is the image (no image is pulled") {
		t.Errorf("up --help still describes host mode as the only one")
	}
}
