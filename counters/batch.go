package counters

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Op is one store call of a batch: a near-limit charge, or (Sync set) a
// `mode: sync` decision. [Store.Do] fills the answer or Err.
type Op struct {
	Sync       bool
	Charge     ChargeRequest
	Answer     ChargeResult
	SyncReq    SyncRequest
	SyncAnswer SyncResult
	Err        error
}

// Do implements Store: every operation in one pipeline (in a cluster, one
// per node), each still one atomic script, or one atomic INCRBY (a sync
// fixed or Envoy window: plainsync.go). A script the server lost (a
// restart, SCRIPT FLUSH) is loaded and its operations sent once more.
func (r *Redis) Do(ctx context.Context, ops []*Op) {
	cmds := make([]*redis.Cmd, len(ops))
	scripts := make([]*redis.Script, len(ops))
	// send runs the operations that need it (all, or those that met
	// NOSCRIPT) and reads their answers; a NOSCRIPT answer stays raw in
	// Err for the retry.
	send := func(need func(*Op) bool) {
		p := r.c.Pipeline()
		calls := r.plainCalls(ops, need)
		for _, pc := range calls {
			pc.queue(ctx, p)
		}
		sent := len(calls)
		for i, op := range ops {
			cmds[i] = nil
			if !need(op) {
				continue
			}
			op.Err = nil
			var keys []string
			var args []any
			if op.Sync && plain(&op.SyncReq) {
				continue // in calls
			}
			if op.Sync {
				var err error
				if scripts[i], keys, args, err = r.syncCall(&op.SyncReq); err != nil {
					op.Err = err
					continue
				}
			} else {
				scripts[i], keys, args = r.chargeCall(&op.Charge)
			}
			cmds[i] = scripts[i].EvalSha(ctx, p, keys, args...)
			sent++
		}
		if sent == 0 {
			return
		}
		p.Exec(ctx) // every command carries its own error
		for _, pc := range calls {
			pc.answer()
		}
		for i, op := range ops {
			if cmds[i] == nil {
				continue
			}
			res, err := cmds[i].Result()
			switch {
			case isNoScript(err):
				op.Err = err
			case err != nil:
				op.Err = unavailable(opName(op), err)
			case op.Sync:
				op.SyncAnswer, op.Err = parseSync(res)
			default:
				op.Answer, op.Err = parseCharge(op.Charge.Kind, res)
			}
		}
		r.takeBack(ctx, calls)
	}
	send(func(*Op) bool { return true })
	if anyNoScript(ops) {
		loaded := map[*redis.Script]error{}
		for i, op := range ops {
			if isNoScript(op.Err) {
				if _, done := loaded[scripts[i]]; !done {
					loaded[scripts[i]] = scripts[i].Load(ctx, r.c).Err()
				}
			}
		}
		send(func(op *Op) bool { return isNoScript(op.Err) })
		for _, op := range ops {
			if isNoScript(op.Err) {
				op.Err = unavailable(opName(op), op.Err)
			}
		}
	}
}

func opName(op *Op) string {
	if op.Sync {
		return "sync charge"
	}
	return "charge"
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

func anyNoScript(ops []*Op) bool {
	for _, op := range ops {
		if isNoScript(op.Err) {
			return true
		}
	}
	return false
}

// Do implements Store: the operations one after another, each atomic.
func (s *MemStore) Do(ctx context.Context, ops []*Op) {
	for _, op := range ops {
		if op.Sync {
			op.SyncAnswer, op.Err = s.ChargeSync(ctx, &op.SyncReq)
		} else {
			op.Answer, op.Err = s.Charge(ctx, &op.Charge)
		}
	}
}
