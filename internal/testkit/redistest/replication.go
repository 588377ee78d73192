package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Info returns the fields of INFO section of a running server.
func (s *Server) Info(section string) (map[string]string, error) {
	out, err := s.CLI("info", section)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// WaitReplicated waits until every replica of master has processed the
// replication stream up to the offset the master is at when it is called:
// every write the master applied before the call is then on its replicas
// too (replication itself stays asynchronous). It fails when the master has
// no replica.
func WaitReplicated(master *Server, timeout time.Duration) error {
	info, err := master.Info("replication")
	if err != nil {
		return err
	}
	want, err := strconv.ParseInt(info["master_repl_offset"], 10, 64)
	if err != nil {
		return fmt.Errorf("redistest: %s: master_repl_offset: %w", master.Addr, err)
	}
	var ports []int
	for k, v := range info {
		if !strings.HasPrefix(k, "slave") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if p, ok := strings.CutPrefix(f, "port="); ok {
				if port, err := strconv.Atoi(p); err == nil {
					ports = append(ports, port)
				}
			}
		}
	}
	if len(ports) == 0 {
		return fmt.Errorf("redistest: %s has no replica", master.Addr)
	}
	deadline := time.Now().Add(timeout)
	for _, port := range ports {
		for {
			r := &Server{Port: port}
			ri, err := r.Info("replication")
			if err == nil {
				if off, err := strconv.ParseInt(ri["slave_repl_offset"], 10, 64); err == nil && off >= want {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redistest: replica on port %d of %s not at offset %d: %v %s", port, master.Addr, want, err, ri["slave_repl_offset"])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
