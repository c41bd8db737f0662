package counters

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/internal/testsvc"
)

// randomOps is a mixed batch: window and bucket charges and sync
// decisions over a few counters, some over their limits.
func randomOps(r *rand.Rand, tag string, n int) []*Op {
	ops := make([]*Op, n)
	for i := range ops {
		k := fmt.Sprintf("api:k|k=%s%d", tag, r.IntN(4))
		cost := int64(r.IntN(4))
		switch r.IntN(3) {
		case 0:
			ops[i] = &Op{Charge: ChargeRequest{Key: k, Kind: KindWindow, Instance: "a/1", Now: w0 + 5e9, Cost: cost,
				Window: w0, WindowNanos: 60e9, Ceiling: 10, ChargeDenied: r.IntN(2) == 0}}
		case 1:
			ops[i] = &Op{Charge: ChargeRequest{Key: k, Kind: KindTAT, Instance: "a/1", Now: w0 + 5e9, Cost: cost,
				WindowNanos: 60e9, Burst: 5, RateTokens: 10}}
		default:
			ops[i] = &Op{Sync: true, SyncReq: SyncRequest{Key: k, Algorithm: config.AlgFixedWindow, Limit: 6,
				Window: int64(time.Minute), Cost: cost, Now: w0 + 5e9}}
		}
	}
	return ops
}

// TestDoAgreesWithOneByOne: a batch through Do answers exactly as the
// same operations made one at a time on the in-memory store, on every
// store (Redis and the cluster: one pipeline, one per node).
func TestDoAgreesWithOneByOne(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ref := NewMemStore()
			r := rand.New(rand.NewPCG(7, 11))
			tag := testsvc.Unique(name)
			for round := range 20 {
				ops := randomOps(r, tag, 1+r.IntN(40))
				s.Do(ctx, ops)
				for i, op := range ops {
					if op.Err != nil {
						t.Fatalf("round %d op %d: %v", round, i, op.Err)
					}
					if op.Sync {
						want, err := ref.ChargeSync(ctx, &op.SyncReq)
						if err != nil || want.Allowed != op.SyncAnswer.Allowed || want.Remaining != op.SyncAnswer.Remaining {
							t.Fatalf("round %d op %d (sync %+v): got %+v, want %+v %v", round, i, op.SyncReq, op.SyncAnswer, want, err)
						}
						continue
					}
					want, err := ref.Charge(ctx, &op.Charge)
					if err != nil || want.Allowed != op.Answer.Allowed || want.Total != op.Answer.Total || want.Own != op.Answer.Own ||
						want.Instances != op.Answer.Instances || want.Cum != op.Answer.Cum {
						t.Fatalf("round %d op %d (%+v): got %+v, want %+v %v", round, i, op.Charge, op.Answer, want, err)
					}
				}
			}
		})
	}
}

// TestDoReloadsLostScripts: after SCRIPT FLUSH every operation of the next
// batch still gets its answer (loaded once, sent again).
func TestDoReloadsLostScripts(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	defer c.Close()
	s := NewRedis(c, testsvc.Unique("t"), 0)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	s.Do(ctx, randomOps(r, "warm", 5))
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ops := randomOps(r, "after", 30)
	s.Do(ctx, ops)
	for i, op := range ops {
		if op.Err != nil {
			t.Fatalf("op %d after SCRIPT FLUSH: %v", i, op.Err)
		}
	}
}

// TestDoStoreDown: every operation fails with ErrStoreUnavailable.
func TestDoStoreDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	ops := randomOps(rand.New(rand.NewPCG(3, 4)), "down", 5)
	NewRedis(c, "t", 0).Do(context.Background(), ops)
	for i, op := range ops {
		if !errors.Is(op.Err, ErrStoreUnavailable) {
			t.Fatalf("op %d: %v", i, op.Err)
		}
	}
}
