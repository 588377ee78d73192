package redistest

import "syscall"

// Pause stops the server's process (SIGSTOP): it keeps its connections and
// its data, and answers nothing, as a Redis hung by a long command, a
// stalled disk or a frozen VM, until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT): it answers what it was sent
// meanwhile.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process.Signal(sig)
}
