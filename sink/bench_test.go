package sink

import (
	"context"
	"os"
	"testing"
	"time"

	eventsv1 "github.com/velvetrope/velvetrope/events/v1"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// benchDeltas makes n deltas over keys streams in one minute, each a later
// version of its row.
func benchDeltas(n, keys int) []*eventsv1.Delta {
	ds := make([]*eventsv1.Delta, n)
	for i := range ds {
		ds[i] = &eventsv1.Delta{InstanceId: "c/1", Sequence: uint64(i + 1), Domain: "api", RuleId: "api:user_id",
			DescriptorText: "user_id=" + string(rune('a'+i%keys%26)) + string(rune('a'+i%keys/26%26)),
			Minute:         &eventsv1.MinuteUsage{MinuteUnix: t0.Unix(), Stream: uint64(i%keys + 1), AllowedCount: uint64(i/keys + 1)}}
	}
	return ds
}

// BenchmarkWriterAdd is what the aggregator pays per delta to hand it to
// the analytics buffer (the path that must never slow counting).
func BenchmarkWriterAdd(b *testing.B) {
	w, err := NewWriter(WriterConfig{}, NewMemory(0))
	if err != nil {
		b.Fatal(err)
	}
	ds := benchDeltas(1000, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(ds) {
		w.Add(ds)
	}
}

// BenchmarkClickHouseInsert writes batches of 10,000 rows into the real
// server (ClickHouse and the client share the machine's 2 cores).
func BenchmarkClickHouseInsert(b *testing.B) {
	if os.Getenv(testsvc.EnvClickHouse) == "" {
		b.Skip("no ClickHouse: make services-up; source .services.env")
	}
	ch, err := NewClickHouse(ClickHouseConfig{Addr: testsvc.ClickHouse(b), Database: testsvc.Unique("bench")})
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	rows := make([]Row, 10_000)
	for i := range rows {
		rows[i] = Row{Minute: t0.Unix() + int64(i%60)*60, Domain: "api", Rule: "api:user_id", Descriptor: "user_id=" + string(rune('a'+i%26)),
			Instance: "c/1", Stream: uint64(i), Version: 1, Allowed: uint64(i % 7), Denied: uint64(i % 3)}
	}
	ctx := context.Background()
	if err := ch.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := ch.Insert(ctx, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(rows))/time.Since(start).Seconds(), "rows/s")
}
