package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, 100 on every
// Linux architecture Kubernetes runs on).
const userHZ = 100

// ReadNode reads what the whole machine uses from /proc: the CPU time
// spent other than idle or waiting for I/O (all CPUs, since boot), and its
// memory as cAdvisor counts the root cgroup's: in use (all but free), the
// working set (that less the inactive file cache) and what the kernel
// says is available.
func ReadNode() (NodeUsage, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return NodeUsage{}, err
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return NodeUsage{}, err
	}
	return parseNode(stat, meminfo)
}

// parseNode is ReadNode on the files' contents.
func parseNode(stat, meminfo []byte) (NodeUsage, error) {
	var n NodeUsage
	cpuSeen := false
	s := bufio.NewScanner(bytes.NewReader(stat))
	for s.Scan() {
		f := strings.Fields(s.Text())
		switch {
		case len(f) > 8 && f[0] == "cpu":
			// user nice system idle iowait irq softirq steal
			var ticks uint64
			for i, v := range f[1:9] {
				if i == 3 || i == 4 {
					continue
				}
				x, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return NodeUsage{}, fmt.Errorf("/proc/stat: %w", err)
				}
				ticks += x
			}
			n.CPU = time.Duration(ticks) * (time.Second / userHZ)
			cpuSeen = true
		case len(f) == 2 && f[0] == "btime":
			if sec, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				n.StartTime = time.Unix(sec, 0).UTC()
			}
		}
	}
	if !cpuSeen {
		return NodeUsage{}, fmt.Errorf("/proc/stat has no cpu line")
	}
	mem := map[string]uint64{}
	s = bufio.NewScanner(bytes.NewReader(meminfo))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		x, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			x *= 1024
		}
		mem[k] = x
	}
	total, free := mem["MemTotal"], mem["MemFree"]
	if total == 0 {
		return NodeUsage{}, fmt.Errorf("/proc/meminfo has no MemTotal")
	}
	n.Memory = total - min(free, total)
	n.WorkingSet = n.Memory - min(mem["Inactive(file)"], n.Memory)
	n.Available = mem["MemAvailable"]
	return n, nil
}
