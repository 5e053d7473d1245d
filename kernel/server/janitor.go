package server

import (
	"os"
	"slices"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// janitor removes expired jobs (see job.expires) until the server stops.
func (s *Server) janitor() {
	defer close(s.janitorDone)
	every := min(max(s.cfg.Keep/4, 100*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.expire(now)
		case <-s.stop:
			return
		}
	}
}

// expire forgets every job whose Keep period is over at now and deletes its files.
func (s *Server) expire(now time.Time) {
	var gone []*job
	s.mu.Lock()
	for id, j := range s.jobs {
		if e := j.expires(s.cfg.Keep); !e.IsZero() && now.After(e) {
			delete(s.jobs, id)
			gone = append(gone, j)
		}
	}
	s.mu.Unlock()
	for _, j := range gone {
		s.log.Info("job expired", "job", j.id)
		s.remove(j)
	}
}

// forget cancels job id if it is unfinished and deletes it and its results at once (DELETE).
func (s *Server) forget(id string) bool {
	if _, _, found := s.cancel(id); !found {
		return false
	}
	s.mu.Lock()
	j := s.jobs[id]
	delete(s.jobs, id)
	s.broadcast()
	s.mu.Unlock()
	if j != nil {
		s.remove(j)
	}
	return true
}

// remove deletes j's directory; nothing writes it afterwards (see job.removed).
func (s *Server) remove(j *job) {
	j.persist.Lock()
	defer j.persist.Unlock()
	s.mu.Lock()
	j.removed = true
	s.mu.Unlock()
	if err := os.RemoveAll(s.jobDir(j.id)); err != nil {
		s.log.Warn("removing a job's files", "job", j.id, "err", err)
	}
}

// fetched records that table name of j went to a client in full. Once every table has, the Keep period
// starts, and the manifest records it so that a restart keeps counting.
func (s *Server) fetched(j *job, name string) {
	s.mu.Lock()
	if j.fetched == nil {
		j.fetched = map[string]bool{}
	}
	j.fetched[name] = true
	all := !slices.ContainsFunc(j.tables, func(t string) bool { return !j.fetched[t] })
	first := all && j.fetchedAt.IsZero() && j.state == api.StateDone
	if first {
		j.fetchedAt = time.Now()
	}
	s.mu.Unlock()
	if first {
		s.persist(j)
	}
}
