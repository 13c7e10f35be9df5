package main

// methodology is the fixed part of the results page: how to run and what
// the figures mean.
const methodology = "Run it yourself (about three hours for the default suite at both budgets on two cores; the\n" +
	"tables say what this run was):\n\n" +
	"```sh\n" +
	"go run ./bench -suite default                 # workloads 1-5, QPS/burst 50/100 and 500/1000, 3 repeats\n" +
	"go run ./bench -suite long                    # also one Job of 100,000 completions\n" +
	"go run ./bench -suite goals                   # issue 27's goals at their stated sizes, QPS/burst 100/200 (about 20 minutes)\n" +
	"go run ./bench -workloads ttl,small -repeats 1 -qps 500/1000 -scale 0.1 -out /tmp/b.md   # a quick look\n" +
	"```\n\n" +
	"Flags: `-suite default|long|goals`, `-workloads` (comma list of `nonindexed,indexed,small,ttl,memory,long,fairness,busy,startup`),\n" +
	"`-repeats` (default 3), `-qps` (QPS/burst budgets, default `50/100,500/1000`), `-workers` (default 5),\n" +
	"`-scale` (multiplies the sizes, for quick runs), `-out` (this page), `-json` (raw results, default next\n" +
	"to `-out`), `-keep` (keep the control plane's directory and every controller's log).\n\n" +
	"How it measures:\n\n" +
	"- One embedded control plane (`pkg/controlplane`: etcd, kube-apiserver v1.36.3, garbage collector) for the\n" +
	"  whole run, with jobkeeper's TTLPolicy CRD installed as `jobkeeper up` does. No node agent: the benchmark plays the kubelet itself and writes every pod `Succeeded` the\n" +
	"  moment it appears (`bench/harness.InstantKubelet`), so the controllers are the bottleneck, not pods.\n" +
	"- Each controller under test runs in a **child process**, a lean binary the bench builds first, as a user\n" +
	"  would deploy it: `bench/cmd/jobkeeper-child` links `pkg/manager` as `jobkeeper-controller` does, and\n" +
	"  `bench/cmd/upstream-child` links only upstream's two controllers; neither links an apiserver or etcd.\n" +
	"  CPU is the child's user+system time (the kernel's rusage) and peak RSS its\n" +
	"  `VmHWM` (/proc), so they are the controller's alone. The child samples `runtime/metrics` every 50 ms\n" +
	"  for the peak heap in use and, on SIGTERM, reads the live heap after a forced GC (\"live heap at the\n" +
	"  end\") before stopping.\n" +
	"- jobkeeper runs through `pkg/manager`, exactly as `jobkeeper-controller` runs it with its default flags\n" +
	"  (shared informers, TTL deletion events off as upstream, `--manage-unclaimed-jobs` so that plain Jobs are\n" +
	"  managed, HTTP endpoints off). Upstream runs\n" +
	"  `k8s.io/kubernetes/pkg/controller/job` and `.../ttlafterfinished` wired as kube-controller-manager wires\n" +
	"  them: one shared informer factory with its own client and one client per controller\n" +
	"  (`bench/upstream.Start`). Both get the same QPS/burst per client and the same workers,\n" +
	"  and both speak protobuf to the built-in APIs (kube-controller-manager's default `--kube-api-content-type`).\n" +
	"- The child's kubeconfig points at a **counting reverse proxy** in the parent (TLS, so HTTP/2 with one\n" +
	"  multiplexed connection, as against a real apiserver), which forwards to the\n" +
	"  apiserver: every request of the controller (list, watch, discovery, events included) is counted by\n" +
	"  verb and resource the same way for both. The set-up and the instant kubelet use a direct, uncounted\n" +
	"  client.\n" +
	"- Each run uses a fresh namespace that is emptied afterwards (informers are cluster-wide, so leftovers\n" +
	"  would be listed by later runs). Within a repeat the two implementations alternate, jobkeeper first in\n" +
	"  odd repeats and upstream first in even ones. Tables show the median of the repeats; the ratio is\n" +
	"  jobkeeper/upstream (below 1: jobkeeper uses less or is faster).\n\n" +
	"Workloads and end states:\n\n" +
	"1. `nonindexed`, 2. `indexed`, 3. `small`, 6. `long` (Job controllers only): the child starts and syncs,\n" +
	"   then the Jobs are created; wall time runs from the first creation request to the last Job seen\n" +
	"   `Complete`; the run ends when no pod holds the `batch.kubernetes.io/job-tracking` finalizer, so the\n" +
	"   finalizer removals are counted (and timed: \"wall to no tracking finalizer left\"). For many Jobs, p50/p99 of each Job's creation to `Complete`.\n" +
	"4. `ttl` (TTL-after-finished controllers only): the finished Jobs (TTL 0, completed a minute earlier) exist\n" +
	"   before the child starts; wall time runs from the child's start to no Job left in the namespace (the\n" +
	"   garbage collector finishes upstream's foreground deletions).\n" +
	"5. `memory` (both controllers, as `jobkeeper controller` runs by default): 10,000 finished Jobs and\n" +
	"   100,000 pods (created through the API with each Job's labels and controller reference, left `Pending`:\n" +
	"   nothing runs them) exist before the child starts; start-up is from the child's start to its informers\n" +
	"   synced; the child then runs 10 s more before the steady heap is read. The objects are created once and\n" +
	"   shared by every run of the workload.\n" +
	"7. `fairness` (Job controllers only): one NonIndexed Job of 2,000 completions at parallelism 500, and from\n" +
	"   2 s after its creation 20 one-pod Jobs, one every 100 ms; wall time is the big Job's (creation to\n" +
	"   `Complete`), p50/p99 the one-pod Jobs' creation to `Complete`, and a line says whether issue 27's goal\n" +
	"   (p99 <= 1.0 s at QPS 100) is met.\n" +
	"8. `busy` (both controllers): 10,000 pods that belong to no Job, shaped like a Deployment's (two containers\n" +
	"   with ports, environment, resources, probes and mounts, two volumes, a ReplicaSet owner, written `Running`\n" +
	"   with a kubelet's status), exist in a namespace of their own before the child starts, as the other\n" +
	"   workloads of a busy cluster; then one NonIndexed Job of 2,000 completions at parallelism 500 runs as in\n" +
	"   workload 1. A line says whether issue 27's goal (peak RSS <= 0.25x upstream's) is met, and another lists\n" +
	"   each side's pod lists and watches: what keeping pods in memory costs in requests, which must not grow\n" +
	"   with the pods of no Job. The pods are created once and shared by every run of the workload.\n" +
	"9. `startup` (both controllers): one NonIndexed Job whose 10,000 pods exist and run (created by the bench\n" +
	"   with the Job's labels, controller reference and tracking finalizer, as if its controller had created them\n" +
	"   before a restart), with parallelism 100 above them, exists before the child starts; the figure is the time\n" +
	"   from the child's start to its first pod creation request, counted at the proxy. After each run the pods\n" +
	"   the controller created are removed, so every run starts from the same state.\n" +
	"\n" +
	"Goal lines: issue 27's goals stated as ratios are checked against the medians of the same run, side by\n" +
	"side: controller CPU <= 0.85x on `nonindexed` and `small` (stated for 2,000 pods and for 100 Jobs of 5, so\n" +
	"at `-scale 0.2` and `-scale 0.1`), peak RSS <= 0.25x on `busy`, and start-up <= 1.0x on `startup`; and the\n" +
	"one-pod Jobs' create to `Complete` p99 <= 1.0 s on `fairness`. `-suite goals` runs exactly these, each at\n" +
	"its stated size, in one run. The bench\n" +
	"exits non-zero when a run failed a check of its end state (exact succeeded counts, no tracking finalizer\n" +
	"left) or timed out, after writing the results.\n"
