package daemon

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Connection budget defaults. Each connection a listener holds is a file
// descriptor (a proxied one two: the client's and the upstream's), and a
// daemon out of descriptors cannot open its store, reach the engine, or
// accept anyone: the listeners share what the process may open, less a
// reserve, and each source gets a share of its listener.
const (
	// DefaultMaxConnsPerSource is how many connections one source address
	// may hold on each of the API, the preview proxy and SSH.
	DefaultMaxConnsPerSource = 512
	// DefaultEgressMaxConnsPerSandbox is how many connections one sandbox
	// may hold through the egress proxy.
	DefaultEgressMaxConnsPerSandbox = 1024
	// minFDReserve is the least kept aside for the store, the engine, the
	// agents, logs and the TCP forwards; a tenth of the limit when more.
	minFDReserve = 1024
	// DefaultDiskMB is every sandbox's disk limit unless --disk-mb says
	// otherwise (10 GiB).
	DefaultDiskMB = 10240
	// DefaultVolumeSizeMB is the size of a volume whose create names none,
	// and the most one may name, unless --volume-size-mb says otherwise
	// (10 GiB, as a sandbox's disk).
	DefaultVolumeSizeMB = 10240
	// DefaultEgressIdleTimeout is how long a connection through the egress
	// proxy may pass nothing, either way, before it is closed.
	DefaultEgressIdleTimeout = egress.DefaultIdleTimeout
)

// raiseNoFile raises the soft limit on open files to the hard one (a
// systemd unit's default soft limit is 1024 and its hard one far higher)
// and returns the limit in force.
func raiseNoFile(log *slog.Logger) uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("file descriptors: cannot read the limit", "err", err)
		return 0
	}
	soft := rl.Cur
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("file descriptors: cannot raise the limit to the hard limit", "soft", rl.Cur, "hard", rl.Max, "err", err)
		} else {
			rl = raised
		}
	}
	log.Info("file descriptors", "limit", rl.Cur, "was", soft, "hard", rl.Max)
	return rl.Cur
}

// connBudget is each listener's share of the descriptors.
type connBudget struct {
	limit, reserve          uint64
	api, proxy, ssh, egress httpguard.ConnLimits
	// cluster is the cluster port's (serve --cluster), and apart the
	// gossip port's: a twentieth each, like SSH, since their peers are a
	// handful of nodes.
	cluster httpguard.ConnLimits
}

// budgetFor shares limit descriptors out: after the reserve, a fifth to
// the API, two fifths to the preview proxy (two descriptors a proxied
// request), three tenths to the egress proxy (two a connection), a tenth
// to SSH (a session reaches an agent too). --max-conns and
// --egress-max-conns, when set, replace the totals.
func budgetFor(limit uint64, cfg Config) connBudget {
	b := connBudget{limit: limit, reserve: max(minFDReserve, limit/10)}
	var avail int
	if limit > b.reserve {
		avail = int(limit - b.reserve)
	}
	perSource := cfg.MaxConnsPerSource
	if perSource == 0 {
		perSource = DefaultMaxConnsPerSource
	}
	total := func(share int) int {
		if cfg.MaxConns > 0 {
			return cfg.MaxConns
		}
		return max(share, 1)
	}
	b.api = httpguard.ConnLimits{Total: total(avail / 5), PerSource: perSource}
	b.proxy = httpguard.ConnLimits{Total: total(avail / 5), PerSource: perSource}
	b.ssh = httpguard.ConnLimits{Total: total(avail / 20), PerSource: perSource}
	b.cluster = httpguard.ConnLimits{Total: total(avail / 20), PerSource: perSource}
	egressTotal := cfg.EgressMaxConns
	if egressTotal == 0 {
		egressTotal = max(avail*3/20, 1)
	}
	perSandbox := cfg.EgressMaxConnsPerSandbox
	if perSandbox == 0 {
		perSandbox = DefaultEgressMaxConnsPerSandbox
	}
	b.egress = httpguard.ConnLimits{Total: egressTotal, PerSource: perSandbox}
	if cfg.MaxConnsPerSource < 0 {
		b.api.PerSource, b.proxy.PerSource, b.ssh.PerSource, b.cluster.PerSource = 0, 0, 0, 0
	}
	if cfg.EgressMaxConnsPerSandbox < 0 {
		b.egress.PerSource = 0
	}
	return b
}

func (b connBudget) log(log *slog.Logger) {
	log.Info("connection budget", "fd_limit", b.limit, "fd_reserve", b.reserve,
		"api", b.api.Total, "proxy", b.proxy.Total, "ssh", b.ssh.Total, "cluster", b.cluster.Total, "egress", b.egress.Total,
		"per_source", b.api.PerSource, "egress_per_sandbox", b.egress.PerSource)
}

// memAvailableMB reads the host's available memory (MemAvailable in
// /proc/meminfo), which bounds the warm pool's growth.
func memAvailableMB() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10, err
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
