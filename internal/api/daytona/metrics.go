package daytona

import (
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// SystemMetrics is the answer of GET /toolbox/{id}/system/metrics. Memory
// and disk are in bytes.
type SystemMetrics struct {
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemTotal      int64   `json:"memTotal"`
	MemUsed       int64   `json:"memUsed"`
	MemCache      int64   `json:"memCache"`
	DiskTotal     int64   `json:"diskTotal"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskFree      int64   `json:"diskFree"`
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
}

// systemMetrics samples the sandbox's container through the engine: CPU and
// memory as its cgroup accounts them, the memory total being its limit (the
// host's memory without one). The engine sets no disk quota, so the disk
// total is the sandbox's disk allocation, as reported in its model.
func (h *toolboxAPI) systemMetrics(w http.ResponseWriter, r *http.Request) {
	x := r.PathValue("id")
	sb, err := h.svc.GetSandboxByIDOrName(r.Context(), x)
	if err != nil {
		WriteError(w, r, lookupError(err, x))
		return
	}
	h.svc.Touch(r.Context(), sb.ID, false)
	st, err := h.svc.Stats(r.Context(), sb.ID)
	if err != nil {
		WriteError(w, r, lookupError(err, x))
		return
	}
	diskTotal := int64(h.res.diskGiB(sb.DiskMB) * (1 << 30))
	free := diskTotal - st.DiskUsed
	if free < 0 {
		free = 0
	}
	ts := st.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	api.WriteJSON(w, http.StatusOK, SystemMetrics{
		CPUCount:      st.CPUCount,
		CPUUsedPct:    st.CPUUsedPct,
		MemTotal:      st.MemTotal,
		MemUsed:       st.MemUsed,
		DiskTotal:     diskTotal,
		DiskUsed:      st.DiskUsed,
		DiskFree:      free,
		Timestamp:     ts.UTC().Format(time.RFC3339Nano),
		TimestampUnix: ts.Unix(),
	})
}
