// Command report is the helper of test/conformance/run.sh. It reads the JSON
// reports that upstream's e2e.test writes (--ginkgo.json-report) and
//
//	report list <dry-run.json>
//
// prints the specs a dry run selected, one a line: id, serial (0/1), the
// exact --ginkgo.focus regex of that one spec, and its full name, separated
// by tabs;
//
//	report table -list <dry-run.json> -results <dir> -doc <file> [meta flags]
//
// reads <dir>/<id>.json and <dir>/<id>.status (exit code, start and end
// time, written by run.sh) for every spec and writes the results table into
// <file> (docs/conformance.md) between the generated-section markers, keeping
// whatever the file holds outside them, and prints the totals.
//
// It has no dependency beyond the standard library: the few fields of
// ginkgo's report that it needs are declared here.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ginkgoReport is the part of ginkgo v2's types.Report used here.
type ginkgoReport struct {
	SuiteDescription string
	SpecReports      []specReport
}

type codeLocation struct {
	FileName   string
	LineNumber int
}

// specReport is the part of ginkgo v2's types.SpecReport used here.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeLocation        codeLocation
	LeafNodeLabels          []string
	LeafNodeText            string
	State                   string
	IsSerial                bool
	RunTime                 time.Duration
	Failure                 struct {
		Message         string
		Location        codeLocation
		FailureNodeType string
	}
}

// fullText is the spec's name as ginkgo prints it (types.SpecReport.FullText).
func (s specReport) fullText() string {
	texts := slices.DeleteFunc(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), func(t string) bool { return t == "" })
	return strings.Join(texts, " ")
}

func (s specReport) hasLabel(l string) bool { return slices.Contains(s.LeafNodeLabels, l) }

// selected returns the It specs that a dry run selected (ginkgo reports a
// spec it did not select as skipped), in the order of the report.
func selected(r ginkgoReport) []specReport {
	var out []specReport
	for _, s := range r.SpecReports {
		if s.LeafNodeType == "It" && s.State == "passed" {
			out = append(out, s)
		}
	}
	return out
}

func readReport(path string) (ginkgoReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ginkgoReport{}, err
	}
	var rs []ginkgoReport
	if err := json.Unmarshal(data, &rs); err != nil {
		return ginkgoReport{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(rs) != 1 {
		return ginkgoReport{}, fmt.Errorf("%s: %d suite reports, want 1", path, len(rs))
	}
	return rs[0], nil
}

// focus is the regex that selects exactly this spec: ginkgo matches
// --ginkgo.focus against the suite description, a space and the full text.
func focus(suite string, s specReport) string {
	return "^" + regexp.QuoteMeta(suite+" "+s.fullText()) + "$"
}

func specID(i int) string { return fmt.Sprintf("%03d", i+1) }

func list(path string) error {
	r, err := readReport(path)
	if err != nil {
		return err
	}
	specs := selected(r)
	if len(specs) == 0 {
		return fmt.Errorf("%s: the dry run selected no spec", path)
	}
	for i, s := range specs {
		if strings.ContainsAny(s.fullText(), "\t\n") {
			return fmt.Errorf("spec name with a tab or newline: %q", s.fullText())
		}
		serial := 0
		// The e2e framework marks [Serial] specs with a label and in the
		// name, not with ginkgo's Serial decorator (IsSerial stays false).
		if s.IsSerial || s.hasLabel("Serial") || strings.Contains(s.fullText(), "[Serial]") {
			serial = 1
		}
		fmt.Printf("%s\t%d\t%s\t%s\n", specID(i), serial, focus(r.SuiteDescription, s), s.fullText())
	}
	return nil
}

// result is what happened to one spec.
type result struct {
	spec        specReport
	conformance bool
	outcome     string // pass, fail, skip, timeout, error
	detail      string // failure or skip message, or what went wrong
	seconds     int
	notes       []string
}

// status reads <id>.status: "<exit code> <start unix> <end unix>".
func readStatus(path string) (rc, start, end int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	f := strings.Fields(string(data))
	if len(f) != 3 {
		return 0, 0, 0, fmt.Errorf("%s: %q, want \"rc start end\"", path, data)
	}
	vals := make([]int, 3)
	for i := range f {
		if vals[i], err = strconv.Atoi(f[i]); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return vals[0], vals[1], vals[2], nil
}

// firstLines keeps the first n non-empty lines of a message, each shortened.
func firstLines(msg string, n int) string {
	var out []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if len(l) > 240 {
			l = l[:240] + "…"
		}
		out = append(out, l)
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, " / ")
}

func notesOf(s specReport) []string {
	var notes []string
	for _, l := range s.LeafNodeLabels {
		switch {
		case strings.HasPrefix(l, "FeatureGate:"):
			notes = append(notes, "gate "+strings.TrimPrefix(l, "FeatureGate:"))
		case l == "Alpha", l == "Beta", l == "BetaOffByDefault", l == "Serial", l == "Slow":
			notes = append(notes, l)
		case strings.HasPrefix(l, "Feature:"):
			notes = append(notes, l)
		}
	}
	return notes
}

func evaluate(dir, id string, s specReport, timeout string) result {
	res := result{spec: s, conformance: s.hasLabel("Conformance") || strings.Contains(s.fullText(), "[Conformance]"), notes: notesOf(s)}
	rc, start, end, err := readStatus(filepath.Join(dir, id+".status"))
	if err != nil {
		res.outcome, res.detail = "error", "not run: "+err.Error()
		return res
	}
	res.seconds = end - start
	r, repErr := readReport(filepath.Join(dir, id+".json"))
	// timeout(1) exits 124 when it had to stop the command, 137 when it then
	// had to kill it.
	if rc == 124 || rc == 137 {
		res.outcome = "timeout"
		res.detail = fmt.Sprintf("no result after %s (exit %d)", timeout, rc)
		if step := lastStep(filepath.Join(dir, id+".log")); step != "" {
			res.detail += "; last step: " + step
		}
		return res
	}
	if repErr != nil {
		res.outcome, res.detail = "error", fmt.Sprintf("exit %d, no report: %v", rc, repErr)
		return res
	}
	var it *specReport
	for i := range r.SpecReports {
		if x := r.SpecReports[i]; x.LeafNodeType == "It" && x.fullText() == s.fullText() {
			it = &r.SpecReports[i]
		}
	}
	if it == nil {
		res.outcome, res.detail = "error", fmt.Sprintf("exit %d, spec not in its report", rc)
		return res
	}
	switch it.State {
	case "passed":
		res.outcome = "pass"
		if rc != 0 {
			// The spec passed but the suite failed (an AfterSuite check).
			res.outcome = "fail"
			res.detail = fmt.Sprintf("spec passed, suite failed (exit %d): %s", rc, failureOf(r, s))
		}
	case "skipped", "pending":
		res.outcome = "skip"
		res.detail = failureOf(r, s)
	default: // failed, panicked, interrupted, aborted, timedout
		res.outcome = "fail"
		res.detail = failureOf(r, s)
		if it.State != "failed" {
			res.detail = it.State + ": " + res.detail
		}
	}
	return res
}

// stepLine is a ginkgo.By line of the -v output: "STEP: <text> @ <time>".
var stepLine = regexp.MustCompile(`^\s*STEP: (.*) @ \d\d/\d\d/\d\d \d\d:\d\d:\d\d`)

// lastStep is the last ginkgo.By step a spec's log shows before it was
// interrupted (the framework's own after-failure steps excluded).
func lastStep(logPath string) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	var last string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "Interrupted by User") {
			break
		}
		if m := stepLine.FindStringSubmatch(l); m != nil {
			last = m[1]
		}
	}
	return last
}

// failureOf is the first lines of the spec's failure message, or, when the
// spec has none, of the first failed suite node (SynchronizedBeforeSuite...).
func failureOf(r ginkgoReport, s specReport) string {
	var suiteFailure string
	for _, x := range r.SpecReports {
		if x.Failure.Message == "" {
			continue
		}
		where := ""
		if x.Failure.FailureNodeType != "" && x.Failure.FailureNodeType != "It" {
			where = "in " + x.Failure.FailureNodeType + ": "
		}
		msg := where + firstLines(x.Failure.Message, 2)
		if x.LeafNodeType == "It" && x.fullText() == s.fullText() {
			return msg
		}
		if x.LeafNodeType != "It" && suiteFailure == "" {
			suiteFailure = msg
		}
	}
	return suiteFailure
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "<", "&lt;")
	return strings.ReplaceAll(s, "\n", " ")
}

const (
	beginMarker = "<!-- BEGIN GENERATED by test/conformance/run.sh: do not edit by hand -->"
	endMarker   = "<!-- END GENERATED -->"
)

// writeDoc replaces the generated section of doc (or appends one), keeping
// everything else in the file.
func writeDoc(doc, generated string) error {
	section := beginMarker + "\n" + generated + endMarker + "\n"
	old, err := os.ReadFile(doc)
	switch {
	case os.IsNotExist(err):
		return os.WriteFile(doc, []byte("# Upstream e2e specs on jobkeeper up\n\n"+section), 0o644)
	case err != nil:
		return err
	}
	text := string(old)
	b, e := strings.Index(text, beginMarker), strings.Index(text, endMarker)
	if b < 0 || e < b {
		return os.WriteFile(doc, []byte(strings.TrimRight(text, "\n")+"\n\n"+section), 0o644)
	}
	rest := strings.TrimLeft(text[e+len(endMarker):], "\n")
	if rest != "" {
		rest = "\n" + rest
	}
	return os.WriteFile(doc, []byte(text[:b]+section+rest), 0o644)
}

func table(args []string) error {
	fs := flag.NewFlagSet("table", flag.ExitOnError)
	listPath := fs.String("list", "", "the dry run's JSON report")
	dir := fs.String("results", "", "directory with <id>.json and <id>.status")
	doc := fs.String("doc", "", "markdown file to write the generated section into (empty: print it)")
	command := fs.String("command", "", "the command that was run")
	k8s := fs.String("kubernetes", "", "Kubernetes version of e2e.test and of up")
	commit := fs.String("commit", "", "jobkeeper commit")
	started := fs.String("started", "", "start date")
	took := fs.String("took", "", "how long the runs took")
	build := fs.String("build", "", "how e2e.test was obtained and how long it took")
	timeout := fs.String("timeout", "", "the per-spec time bound")
	parallel := fs.String("parallel", "", "specs run at a time")
	images := fs.String("images", "", "up's image mode and the images loaded into its store (empty: not said)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := readReport(*listPath)
	if err != nil {
		return err
	}
	specs := selected(r)
	var results []result
	counts := map[string]int{}
	var conf, confPass int
	for i, s := range specs {
		res := evaluate(*dir, specID(i), s, *timeout)
		results = append(results, res)
		counts[res.outcome]++
		if res.conformance {
			conf++
			if res.outcome == "pass" {
				confPass++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n- Command: `%s`\n", *command)
	fmt.Fprintf(&b, "- Date: %s\n", *started)
	fmt.Fprintf(&b, "- Kubernetes: %s (upstream's `test/e2e` built as `e2e.test`; `jobkeeper up` embeds the same kube-apiserver)\n", *k8s)
	fmt.Fprintf(&b, "- jobkeeper: %s\n", *commit)
	fmt.Fprintf(&b, "- e2e.test: %s\n", *build)
	if *images != "" {
		fmt.Fprintf(&b, "- Images: %s\n", *images)
	}
	fmt.Fprintf(&b, "- Runs: one `e2e.test --provider=skeleton --ginkgo.focus=<that spec>` process per spec, %s at a time ([Serial] specs alone), each bounded by %s; took %s\n", *parallel, *timeout, *took)
	fmt.Fprintf(&b, "\n**%d of %d pass** (%d of %d [Conformance]); %d fail, %d skip, %d timeout",
		counts["pass"], len(results), confPass, conf, counts["fail"], counts["skip"], counts["timeout"])
	if counts["error"] > 0 {
		fmt.Fprintf(&b, ", %d error (not run or no report)", counts["error"])
	}
	b.WriteString(".\n\n")
	b.WriteString("| # | spec | conformance | result | time | failure (first lines) / notes |\n|---|---|---|---|---|---|\n")
	for i, res := range results {
		name := strings.TrimPrefix(res.spec.fullText(), "[sig-apps] ")
		c := ""
		if res.conformance {
			c = "yes"
		}
		detail := res.detail
		if len(res.notes) > 0 {
			n := "(" + strings.Join(res.notes, ", ") + ")"
			if detail == "" {
				detail = n
			} else {
				detail = n + " " + detail
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %ds | %s |\n", specID(i), mdEscape(name), c, res.outcome, res.seconds, mdEscape(detail))
	}
	fmt.Printf("%d of %d pass (%d of %d conformance); %d fail, %d skip, %d timeout, %d error\n",
		counts["pass"], len(results), confPass, conf, counts["fail"], counts["skip"], counts["timeout"], counts["error"])
	if *doc == "" {
		fmt.Print(b.String())
		return nil
	}
	return writeDoc(*doc, b.String())
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: report list <dry-run.json> | report table -list ... -results ... [-doc ...]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "list":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: report list <dry-run.json>")
		} else {
			err = list(os.Args[2])
		}
	case "table":
		err = table(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
