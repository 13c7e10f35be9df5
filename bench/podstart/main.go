// Command podstart measures what a pod network costs `jobkeeper up`, side
// by side: for each network mode it starts `up` on a new data directory
// (--images=host, so no image is pulled), records its ready time ("is up
// in"), its VmRSS once idle, and the start latency of pods created one
// after another (create to Running, as a watch sees it), then stops it.
// Modes are interleaved over the repeats, so that the machine's drift hits
// both alike.
//
//	go run ./bench/podstart -binary /tmp/jk -networks host,pod -pods 30 -repeats 3
//	go run ./bench/podstart -binaries before=/tmp/jk-old@default,after=/tmp/jk@host+pod
//
// It needs root for -networks pod.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	binary := flag.String("binary", "", "the jobkeeper binary (required)")
	networks := flag.String("networks", "host,pod", "comma-separated --network modes to compare (\"default\": no --network flag, for a binary from before it)")
	binaries := flag.String("binaries", "", "comma-separated NAME=PATH binaries to compare, each run with -networks, or with its own modes as NAME=PATH@MODE+MODE (instead of -binary)")
	pods := flag.Int("pods", 30, "pods created one after another per run")
	repeats := flag.Int("repeats", 3, "runs per mode")
	idle := flag.Duration("idle", 15*time.Second, "how long after ready the idle RSS is read")
	flag.Parse()
	type subject struct{ name, binary, mode string }
	var subjects []subject
	switch {
	case *binaries != "":
		for _, nb := range strings.Split(*binaries, ",") {
			name, path, ok := strings.Cut(nb, "=")
			if !ok {
				fmt.Fprintln(os.Stderr, "-binaries: NAME=PATH")
				os.Exit(2)
			}
			modes := strings.Split(*networks, ",")
			if p, m, ok := strings.Cut(path, "@"); ok {
				path, modes = p, strings.Split(m, "+")
			}
			for _, mode := range modes {
				subjects = append(subjects, subject{name + " --network=" + mode, path, mode})
			}
		}
	case *binary != "":
		for _, mode := range strings.Split(*networks, ",") {
			subjects = append(subjects, subject{"--network=" + mode, *binary, mode})
		}
	default:
		fmt.Fprintln(os.Stderr, "-binary or -binaries is required")
		os.Exit(2)
	}
	type result struct {
		ready, rss, pss []float64
		latency         []time.Duration
	}
	results := map[string]*result{}
	for r := range *repeats {
		for _, sub := range subjects {
			if results[sub.name] == nil {
				results[sub.name] = &result{}
			}
			ready, rss, pss, lat, err := run(sub.binary, sub.mode, *pods, *idle)
			if err != nil {
				fmt.Fprintf(os.Stderr, "run %d, %s: %v\n", r+1, sub.name, err)
				os.Exit(1)
			}
			res := results[sub.name]
			res.ready, res.rss, res.pss, res.latency = append(res.ready, ready), append(res.rss, rss), append(res.pss, pss), append(res.latency, lat...)
			fmt.Printf("run %d %s: ready %.2fs idle RSS %.1f MB PSS %.1f MB pod start median %s p90 %s\n",
				r+1, sub.name, ready, rss, pss, pct(lat, 50), pct(lat, 90))
		}
	}
	fmt.Println()
	for _, sub := range subjects {
		res := results[sub.name]
		fmt.Printf("%s: ready median %.2fs  idle RSS median %.1f MB  idle PSS median %.1f MB  pod start (create to Running, %d pods) median %s p90 %s\n",
			sub.name, median(res.ready), median(res.rss), median(res.pss), len(res.latency), pct(res.latency, 50), pct(res.latency, 90))
	}
}

var readyLine = regexp.MustCompile(`is up in ([0-9.]+)s`)

// run starts up with --network=mode, measures it and stops it.
func run(binary, mode string, pods int, idle time.Duration) (float64, float64, float64, []time.Duration, error) {
	dir, err := os.MkdirTemp("", "podstart-")
	if err != nil {
		return 0, 0, 0, nil, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	args := []string{"up", "--data-dir", filepath.Join(dir, "data"), "--port", "0", "--kubeconfig-out", kubeconfig, "--images=host"}
	if mode != "default" {
		args = append(args, "--network="+mode)
	}
	cmd := exec.Command(binary, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	ready := -1.0
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if m := readyLine.FindStringSubmatch(lines.Text()); m != nil {
			ready, _ = strconv.ParseFloat(m[1], 64)
			break
		}
	}
	if ready < 0 {
		return 0, 0, 0, nil, fmt.Errorf("up never got ready:\n%s", strings.Join(seen, "\n"))
	}
	go func() {
		for lines.Scan() {
		}
	}()
	time.Sleep(idle)
	rss, err := vmRSS(cmd.Process.Pid)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	pss, err := treePSS(cmd.Process.Pid)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	var lat []time.Duration
	for i := range pods {
		d, err := startOne(client, fmt.Sprintf("p-%d", i))
		if err != nil {
			return 0, 0, 0, nil, err
		}
		lat = append(lat, d)
	}
	return ready, rss, pss, lat, nil
}

// startOne creates a pod and returns how long it took to be Running.
func startOne(client kubernetes.Interface, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := client.CoreV1().Pods(metav1.NamespaceDefault)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "3600"}}},
		},
	}
	start := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return 0, fmt.Errorf("watching %s: %v", name, ev.Object)
		}
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("pod %s never ran", name)
}

// vmRSS is the resident set of process pid and its descendants, in MB:
// up as a user with --network=pod is a parent, the up inside its
// namespaces and pasta (read once idle, before any pod runs). Pages
// they share (the parent's and the inner up's binary) count once per
// process: treePSS shares them out.
func vmRSS(pid int) (float64, error) { return treeSum(pid, "/status", "VmRSS:") }

// treePSS is the proportional set size of process pid and its
// descendants, in MB: shared pages counted once in all.
func treePSS(pid int) (float64, error) { return treeSum(pid, "/smaps_rollup", "Pss:") }

// treeSum sums field (kB) of /proc/<pid><file> over pid and its
// descendants, in MB.
func treeSum(pid int, file, field string) (float64, error) {
	total := 0.0
	for _, p := range append([]int{pid}, descendants(pid)...) {
		mb, err := procField(p, file, field)
		if err != nil {
			if p == pid {
				return 0, err
			}
			// Ended since it was listed.
			continue
		}
		total += mb
	}
	return total, nil
}

// descendants are the processes below pid, from /proc's parent links.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if f := strings.Fields(string(b[i+1:])); i >= 0 && len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// procField is field (in kB) of /proc/<pid><file>, in MB.
func procField(pid int, file, field string) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d%s", field, pid, file)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(v []time.Duration, p int) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}
