package aggregator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// waitReady polls a.Ready until it matches want (nil: ready; else the
// error must contain want) or the deadline passes. Integration test: the
// real group coordinator and Redis answer in their own time.
func waitReady(t *testing.T, a *Kafka, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := a.Ready()
		if (want == "" && err == nil) || (want != "" && err != nil && strings.Contains(err.Error(), want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness after %v: %v, want %q", within, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIdleAggregatorIsReady: issue 10, item 4. Before, an aggregator with
// no traffic said "no partition assigned yet" forever. Now it is ready
// once it is a member of its group (even with no partition: three members
// on a two-partition topic) and Redis answers, and not ready while Redis
// is down or its broker is gone.
func TestIdleAggregatorIsReady(t *testing.T) {
	pr := testsvc.StartPrivateRedis(t)
	pk := testsvc.StartPrivateKafka(t)
	rc := redis.NewClient(&redis.Options{Addr: pr.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		MaxRetries: -1})
	defer rc.Close()
	store := counters.NewRedis(rc, testsvc.Unique("ready"), 0)
	topic, group := testsvc.Unique("ready"), testsvc.Unique("g")
	var aggs []*Kafka
	for range 3 {
		a, err := NewKafka(Config{Brokers: []string{pk.Addr}, Topic: topic, Group: group, Partitions: 2,
			ReadyInterval: 200 * time.Millisecond}, store)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = a.Stop(ctx)
		}()
		aggs = append(aggs, a)
	}
	for i, a := range aggs {
		if i == 0 {
			waitReady(t, a, "", 30*time.Second) // joining a new group takes a rebalance or two
			continue
		}
		waitReady(t, a, "", 10*time.Second)
	}
	pr.Stop(t)
	waitReady(t, aggs[0], "redis not reachable", 5*time.Second)
	pr.Start(t)
	waitReady(t, aggs[0], "", 10*time.Second)
	pk.Stop(t)
	waitReady(t, aggs[0], "group coordinator not reachable", 10*time.Second)
}
