package local

import (
	"context"
	"strconv"
	"testing"

	"github.com/velvetrope/velvetrope/ratelimit"
)

var sinkCode ratelimit.Code

// BenchmarkLocalCheck is one request with two descriptors (an Envoy rule
// and an algorithm rule) on existing keys: match, key building, peek and
// charge.
func BenchmarkLocalCheck(b *testing.B) {
	l, _ := newLocal(b)
	r := req(1, "envoy_ip", "1.2.3.4", "tenant", "acme")
	var d ratelimit.Decision
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Check(context.Background(), r, &d); err != nil {
			b.Fatal(err)
		}
		sinkCode = d.Code
	}
}

// BenchmarkLocalCheckParallel spreads requests over 1024 tenants from all Ps.
func BenchmarkLocalCheckParallel(b *testing.B) {
	l, _ := newLocal(b)
	reqs := make([]*ratelimit.Request, 1024)
	for i := range reqs {
		reqs[i] = req(1, "envoy_ip", "10.0.0."+strconv.Itoa(i%250), "tenant", "t"+strconv.Itoa(i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var d ratelimit.Decision
		i := 0
		for pb.Next() {
			if err := l.Check(context.Background(), reqs[i&1023], &d); err != nil {
				b.Error(err)
				return
			}
			i++
		}
		sinkCode = d.Code
	})
}
