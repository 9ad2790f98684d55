package daytona

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// hostResources is what a sandbox without a limit can use: the host's CPUs,
// memory and root filesystem. Daytona always reports a sandbox's real
// allocation, and for an unlimited resource that is the host's.
type hostResources struct {
	cpus   float64
	memGiB float64
	diskGB float64
}

// readHostResources reads the host's capacity. diskMB is the daemon's
// enforced writable-layer limit of every sandbox (0 = none), which is then
// what a sandbox without a disk of its own can use.
func readHostResources(diskMB int64) hostResources {
	r := hostResources{cpus: float64(runtime.NumCPU())}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
					r.memGiB = math.Floor(kb / (1 << 20))
				}
			}
		}
		f.Close()
	}
	var st syscall.Statfs_t
	if syscall.Statfs("/", &st) == nil {
		r.diskGB = math.Floor(float64(st.Blocks) * float64(st.Bsize) / (1 << 30))
	}
	if diskMB > 0 {
		r.diskGB = float64(diskMB) / 1024
	}
	return r
}

func (r hostResources) cpu(limit float64) float64 {
	if limit > 0 {
		return limit
	}
	return r.cpus
}

func (r hostResources) memoryGiB(limitMB int64) float64 {
	if limitMB > 0 {
		return float64(limitMB) / 1024
	}
	return r.memGiB
}

func (r hostResources) diskGiB(limitMB int64) float64 {
	if limitMB > 0 {
		return float64(limitMB) / 1024
	}
	return r.diskGB
}
