package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestUpHelpREADMEAndPoliciesAgree checks that `up --help`, the README's
// section "What up runs and what it refuses" and the admission policies say
// the same: every refused kind is refused in the README's table and named in
// the help and in the refusal, and every kind warned of is accepted with a
// warning in the table and named in the help.
func TestUpHelpREADMEAndPoliciesAgree(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### What up runs and what it refuses"
	_, section, ok := strings.Cut(string(data), heading)
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) >= 3 {
			rows[strings.Trim(cells[1], " *")] = cells[2]
		}
	}
	if !strings.Contains(section, "`jobkeeper up --help`") {
		t.Errorf("the README's section does not point to jobkeeper up --help")
	}

	cmd := newUpCommand()
	var help bytes.Buffer
	cmd.SetOut(&help)
	if err := cmd.Help(); err != nil {
		t.Fatal(err)
	}
	helpText := strings.Join(strings.Fields(help.String()), " ")

	refused := strings.Split(strings.ReplaceAll(upRefuses, " and ", ", "), ", ")
	if len(refused) != len(refusedResources) {
		t.Errorf("upRefuses names %d kinds, the policy refuses %d resources (%v)", len(refused), len(refusedResources), refusedResources)
	}
	if row, ok := rows[strings.Join(refused, ", ")]; !ok || !strings.Contains(row, "**refused**") {
		t.Errorf("the README's table has no row refusing %s (rows: %q)", strings.Join(refused, ", "), keys(rows))
	}
	for _, kind := range refused {
		if !strings.Contains(refusalMessage("Deployment"), kind) {
			t.Errorf("the refusal message does not name %s", kind)
		}
		if !strings.Contains(helpText, kind) {
			t.Errorf("up --help does not name %s", kind)
		}
	}
	for _, k := range warnedKinds {
		found := false
		for name, row := range rows {
			if strings.Contains(name, k.kinds) {
				found = true
				if !strings.Contains(row, "accepted with a warning") {
					t.Errorf("the README's row of %s does not say it is accepted with a warning: %s", k.kinds, row)
				}
			}
		}
		if !found {
			t.Errorf("the README's table has no row of %s", k.kinds)
		}
		if !strings.Contains(helpText, "What it accepts with a warning: "+upWarns()) {
			t.Errorf("up --help does not list %s as accepted with a warning", k.kinds)
		}
	}
}

// keys returns the keys of m.
func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
