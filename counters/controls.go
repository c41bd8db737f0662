package counters

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// controlKeys: operator controls live in two keys of one hash tag (one
// cluster slot, so a write and its version bump are one MULTI; the layout:
// docs/design.md). Checkers poll the version and read the hash only when
// it moved.
func (r *Redis) controlKeys() (hash, version string) {
	return r.prefix + ":{ctl}:controls", r.prefix + ":{ctl}:version"
}

// PutControl implements ControlStore.
func (r *Redis) PutControl(ctx context.Context, c Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	hash, version := r.controlKeys()
	_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, hash, c.ID, b)
		p.Incr(ctx, version)
		return nil
	})
	return unavailable("put control", err)
}

// DeleteControl implements ControlStore.
func (r *Redis) DeleteControl(ctx context.Context, id string) (bool, error) {
	hash, version := r.controlKeys()
	var del *redis.IntCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.HDel(ctx, hash, id)
		p.Incr(ctx, version)
		return nil
	})
	if err != nil {
		return false, unavailable("delete control", err)
	}
	return del.Val() > 0, nil
}

// Controls implements ControlStore. Expired controls are removed
// by whichever checker reads them first; a field that is not a control
// (written by hand) is skipped.
func (r *Redis) Controls(ctx context.Context, since, now int64) (int64, []Control, error) {
	hash, version := r.controlKeys()
	v, err := r.c.Get(ctx, version).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		v = 0
	case err != nil:
		return 0, nil, unavailable("read control version", err)
	}
	if v == since {
		return v, nil, nil
	}
	all, err := r.c.HGetAll(ctx, hash).Result()
	if err != nil {
		return 0, nil, unavailable("read controls", err)
	}
	out := make([]Control, 0, len(all))
	var expired []string
	for id, raw := range all {
		var c Control
		if json.Unmarshal([]byte(raw), &c) != nil || c.ID != id {
			continue
		}
		if !c.Live(now) {
			expired = append(expired, id)
			continue
		}
		out = append(out, c)
	}
	if len(expired) > 0 {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, hash, expired...)
			p.Incr(ctx, version)
			return nil
		})
		if err != nil {
			return 0, nil, unavailable("drop expired controls", err)
		}
		v++ // at least; the next poll reads the exact version
	}
	slices.SortFunc(out, func(a, b Control) int { return strings.Compare(a.ID, b.ID) })
	return v, out, nil
}
