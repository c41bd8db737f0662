package checker

import (
	"sync/atomic"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() int64 { return c.ns.Load() }

// t0 is aligned to a day, so Envoy windows start at t0.
const t0 = int64(1_700_006_400) * 1e9

func req(hits int64, kv ...string) *ratelimit.Request {
	r := &ratelimit.Request{Domain: "api", Hits: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, ratelimit.Descriptor{Entries: []config.Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func codes(d ratelimit.Decision) string {
	s := d.Code.String() + ":"
	for _, st := range d.Statuses {
		s += " " + st.Code.String()
	}
	return s
}
