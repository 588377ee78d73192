// Package host reads what the benchmark reports say of the machine they
// ran on.
package host

import (
	"os"
	"strings"
)

// LoadAverage returns the machine's 1-minute load average, or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// CPUModel returns the CPU's model name, or "unknown CPU".
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
