package middleware

import (
	"fmt"
	"sync"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// Emergency is a per-descriptor token bucket decided in this process
// alone, used while the Checker fails and Options.FailOpen is set: Limit
// hits per Per, bursts of Burst. One process's share of a fleet-wide
// budget is unknown to it, so size it for what one instance may let
// through unchecked.
type Emergency struct {
	Limit int64         // hits per Per (10); < 0 disables the budget
	Per   time.Duration // 1 s
	Burst int64         // 2 × Limit
	// MaxKeys bounds the descriptors remembered (65,536); past it the
	// least recently used are forgotten.
	MaxKeys int
}

type emergency struct {
	off   bool
	alg   limiter.TokenBucket
	keyed *limiter.Keyed
	bufs  sync.Pool // *[]byte
}

func newEmergency(e Emergency) (*emergency, error) {
	if e.Limit < 0 {
		return &emergency{off: true}, nil
	}
	if e.Limit == 0 {
		e.Limit = 10
	}
	if e.Per == 0 {
		e.Per = time.Second
	}
	if e.Burst == 0 {
		e.Burst = 2 * e.Limit
	}
	if e.MaxKeys == 0 {
		e.MaxKeys = 1 << 16
	}
	alg := limiter.TokenBucket{Capacity: e.Burst, Refill: limiter.Rate{Tokens: e.Limit, Period: e.Per}}
	if err := alg.Validate(); err != nil {
		return nil, fmt.Errorf("middleware: Options.Emergency: %w", err)
	}
	k, err := limiter.NewKeyed(limiter.WithMaxKeys(e.MaxKeys))
	if err != nil {
		return nil, fmt.Errorf("middleware: Options.Emergency: %w", err)
	}
	em := &emergency{alg: alg, keyed: k}
	em.bufs.New = func() any { b := make([]byte, 0, 128); return &b }
	return em, nil
}

// allow charges every descriptor of req; it admits only when each has
// budget (a refused request charges nothing further: descriptors after
// the refusing one are not charged).
func (e *emergency) allow(req *ratelimit.Request) bool {
	if e == nil || e.off {
		return true
	}
	b := e.bufs.Get().(*[]byte) // the key, escaped as counter keys are: one budget per descriptor
	defer e.bufs.Put(b)
	for i := range req.Descriptors {
		*b = config.AppendEscaped((*b)[:0], req.Domain)
		for _, en := range req.Descriptors[i].Entries {
			*b = append(*b, '|')
			*b = config.AppendEscaped(*b, en.Key)
			*b = append(*b, '=')
			*b = config.AppendEscaped(*b, en.Value)
		}
		cost := max(req.Hits, 0)
		if d := &req.Descriptors[i]; d.HasHits {
			cost = max(d.Hits, 0)
		}
		d, err := e.keyed.Allow(string(*b), e.alg, min(cost, e.alg.Capacity), "")
		if err != nil || !d.Allowed {
			return false
		}
	}
	return true
}
