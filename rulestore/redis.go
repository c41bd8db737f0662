package rulestore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// NewRedis returns a store in Redis (standalone or Cluster) under prefix
// ("vr" in production; the layout is in docs/design.md). It does not own c.
func NewRedis(c redis.UniversalClient, prefix string, opts Options) (*Store, error) {
	if prefix == "" {
		return nil, &InputError{"prefix", "must not be empty"}
	}
	return newStore(&redisBackend{c: c, prefix: prefix}, opts)
}

type redisBackend struct {
	c      redis.UniversalClient
	prefix string
}

// appendScript is the compare-and-set: KEYS[1] the domain's current
// version, KEYS[2] its versions newest first (one hash tag); ARGV[1] the
// version the writer expects, ARGV[2] the new version's record, ARGV[3] how
// many versions to keep. It returns -1 when it wrote, else the current
// version.
var appendScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) then return cur end
redis.call('SET', KEYS[1], cur + 1)
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return -1
`)

// keys names a domain's keys. The domain is base64url-encoded inside the
// hash tag: any domain (with braces, colons or the prefix's separators in
// it) gets keys no other domain shares, all in one cluster slot.
func (r *redisBackend) keys(domain string) (version, versions string) {
	base := r.prefix + ":rules:{" + base64.RawURLEncoding.EncodeToString([]byte(domain)) + "}"
	return base + ":v", base + ":h"
}

func (r *redisBackend) index() string   { return r.prefix + ":rules:domains" }
func (r *redisBackend) channel() string { return r.prefix + ":rules:changes" }

func (r *redisBackend) latest(ctx context.Context, domain string) (Version, bool, error) {
	_, h := r.keys(domain)
	b, err := r.c.LIndex(ctx, h, 0).Bytes()
	if errors.Is(err, redis.Nil) {
		return Version{}, false, nil
	}
	if err != nil {
		return Version{}, false, err
	}
	v, err := decodeRecord(b)
	if err != nil {
		return Version{}, false, fmt.Errorf("%s[0]: %w", h, err)
	}
	return v, true, nil
}

func (r *redisBackend) appendIf(ctx context.Context, expected int64, v Version, keep int) (int64, bool, error) {
	rec, err := json.Marshal(v)
	if err != nil {
		return 0, false, err
	}
	// the index first: a follower polling heads then sees the domain even
	// if this process stops before the write
	if err := r.c.HSet(ctx, r.index(), v.Domain, "").Err(); err != nil {
		return 0, false, err
	}
	cur, h := r.keys(v.Domain)
	res, err := appendScript.Run(ctx, r.c, []string{cur, h}, expected, rec, keep).Int64()
	if err != nil {
		return 0, false, err
	}
	if res != -1 {
		return res, false, nil
	}
	// best effort: a follower that misses it sees the version when it polls
	_ = r.c.Publish(ctx, r.channel(), v.Domain).Err()
	return v.Version, true, nil
}

func (r *redisBackend) history(ctx context.Context, domain string, n int) ([]Version, error) {
	_, h := r.keys(domain)
	recs, err := r.c.LRange(ctx, h, 0, int64(n)-1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Version, 0, len(recs))
	for i, rec := range recs {
		v, err := decodeRecord([]byte(rec))
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", h, i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func (r *redisBackend) heads(ctx context.Context) (map[string]int64, error) {
	domains, err := r.c.HKeys(ctx, r.index()).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(domains))
	if len(domains) == 0 {
		return out, nil
	}
	cmds := make([]*redis.StringCmd, len(domains))
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range domains {
			cur, _ := r.keys(d)
			cmds[i] = p.Get(ctx, cur)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, d := range domains {
		n, err := cmds[i].Int64()
		if errors.Is(err, redis.Nil) {
			continue // indexed by a write that did not happen (yet)
		}
		if err != nil {
			return nil, fmt.Errorf("version of domain %q: %w", d, err)
		}
		out[d] = n
	}
	return out, nil
}

func (r *redisBackend) changes(ctx context.Context) (<-chan string, error) {
	ps := r.c.Subscribe(ctx, r.channel())
	if _, err := ps.Receive(ctx); err != nil { // subscribed before Changes returns
		ps.Close()
		return nil, fmt.Errorf("rulestore: subscribe to %s: %w", r.channel(), err)
	}
	out := make(chan string, 64)
	in := ps.Channel() // go-redis resubscribes after a lost connection
	go func() {
		defer close(out)
		defer ps.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				default: // a slow follower polls heads
				}
			}
		}
	}()
	return out, nil
}

func (r *redisBackend) close() error { return nil }

// decodeRecord reads a stored version, refusing one that could not have
// been written (a store shared with something else, or damaged).
func decodeRecord(b []byte) (Version, error) {
	var v Version
	if err := json.Unmarshal(b, &v); err != nil {
		return Version{}, fmt.Errorf("not a rules version: %w", err)
	}
	switch {
	case v.Version < 1:
		return Version{}, fmt.Errorf("not a rules version: version %d", v.Version)
	case v.Domain == "":
		return Version{}, errors.New("not a rules version: no domain")
	case v.Deleted && v.Body != "":
		return Version{}, errors.New("not a rules version: a delete with a body")
	case !v.Deleted && v.Body == "":
		return Version{}, errors.New("not a rules version: no body")
	case v.Stage != "" && (v.Stage != StageShadow || v.Deleted):
		return Version{}, fmt.Errorf("not a rules version: stage %q", v.Stage)
	case v.Stage == "" && (v.LiveVersion != 0 || v.LiveBody != ""):
		return Version{}, errors.New("not a rules version: a live document on a version that is not staged")
	case v.LiveVersion < 0 || v.LiveVersion >= v.Version || (v.LiveVersion == 0) != (v.LiveBody == ""):
		return Version{}, fmt.Errorf("not a rules version: live version %d", v.LiveVersion)
	}
	return v, nil
}
