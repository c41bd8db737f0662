package main

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/fx"
)

// stopStage is one step of a process's stop. The stages run in the order
// of their values; this is the one place that order is stated.
type stopStage int

const (
	// stopListeners: nothing new is accepted (HTTP and gRPC listeners
	// closed, the calls in flight answered; a drain stops reading its
	// topic), so no decision is made after it.
	stopListeners stopStage = iota
	// stopWork: the checker's last flush hands its pending deltas to the
	// producer (the aggregator: its last batch applied).
	stopWork
	// stopProducer: the producer writes its buffer to Kafka, the rest to
	// its spill file (dev: the embedded aggregator applies what is on the
	// bus, then the bus closes; the aggregator: its usage rows written).
	stopProducer
	// stopClients: the bus and the other clients (Redis, ClickHouse) and
	// background loops (the rules watcher) nothing above uses any more.
	stopClients
	numStopStages
)

// shutdown runs a process's stop steps by stage (stopStage), instead of
// in the reverse of fx's constructor order. Within a stage, the step
// registered last stops first. A step joins once its start succeeded, so
// a start that fails part way stops only what started.
type shutdown struct {
	lc fx.Lifecycle

	mu    sync.Mutex
	steps [numStopStages][]stopStep
	// observe, when set, is told each step just before it runs (tests).
	observe func(stage stopStage, name string)
}

type stopStep struct {
	name string
	stop func(context.Context) error
}

// newShutdown registers the process's one stop hook on lc. It must be
// built before anything that registers a step: everything that does takes
// the *shutdown, so fx builds it first, its hook is fx's first and its
// OnStop fx's last (and the only one that stops anything).
func newShutdown(lc fx.Lifecycle) *shutdown {
	s := &shutdown{lc: lc}
	lc.Append(fx.Hook{OnStop: s.run})
	return s
}

// hook registers start (its error tagged with stage name, as
// stagedStart) and, once start succeeded, stop as a step of stage.
func (s *shutdown) hook(stage stopStage, name string, start, stop func(context.Context) error) {
	st := stagedStart(name, start)
	s.lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
		if err := st(ctx); err != nil {
			return err
		}
		s.add(stage, name, stop)
		return nil
	}})
}

// stop registers stop, for something that has no start, as a step of
// stage, in fx's start order.
func (s *shutdown) stop(stage stopStage, name string, stop func(context.Context) error) {
	s.lc.Append(fx.Hook{OnStart: func(context.Context) error {
		s.add(stage, name, stop)
		return nil
	}})
}

func (s *shutdown) add(stage stopStage, name string, stop func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps[stage] = append(s.steps[stage], stopStep{name, stop})
}

// run stops the steps registered, stage by stage. A step that fails does
// not keep the later ones from stopping (as fx): the errors are joined.
func (s *shutdown) run(ctx context.Context) error {
	s.mu.Lock()
	steps, observe := s.steps, s.observe
	s.steps = [numStopStages][]stopStep{}
	s.mu.Unlock()
	var errs []error
	for stage := stopListeners; stage < numStopStages; stage++ {
		for i := len(steps[stage]) - 1; i >= 0; i-- {
			st := steps[stage][i]
			if observe != nil {
				observe(stage, st.name)
			}
			if st.stop == nil {
				continue
			}
			if err := st.stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
