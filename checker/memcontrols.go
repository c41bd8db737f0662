package checker

import (
	"context"
	"slices"
	"strings"
)

// memControls is MemStore's control table.
type memControls struct {
	version int64
	byID    map[string]Control
}

// PutControl implements ControlStore.
func (s *MemStore) PutControl(_ context.Context, c Control) error {
	if err := s.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctl.byID == nil {
		s.ctl.byID = map[string]Control{}
	}
	c.Entries = slices.Clone(c.Entries)
	s.ctl.byID[c.ID] = c
	s.ctl.version++
	return nil
}

// DeleteControl implements ControlStore.
func (s *MemStore) DeleteControl(_ context.Context, id string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ctl.byID[id]
	if ok {
		delete(s.ctl.byID, id)
		s.ctl.version++
	}
	return ok, nil
}

// Controls implements ControlStore; expired controls are dropped here.
func (s *MemStore) Controls(_ context.Context, since, now int64) (int64, []Control, error) {
	if err := s.check(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.ctl.byID {
		if !c.Live(now) {
			delete(s.ctl.byID, id)
			s.ctl.version++
		}
	}
	if s.ctl.version == since {
		return since, nil, nil
	}
	out := make([]Control, 0, len(s.ctl.byID))
	for _, c := range s.ctl.byID {
		c.Entries = slices.Clone(c.Entries)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Control) int { return strings.Compare(a.ID, b.ID) })
	return s.ctl.version, out, nil
}
