package loadgen

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The two request shapes are encoded by hand into a caller's reused buffer
// (no message structs, no reflection): the load generator shares the
// cores with what it measures, so every cycle it saves is a cycle the
// server under test gets. wire_test.go checks both against the generated
// types.

// Method names of the two protocols.
const (
	envoyMethod      = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	gubernatorMethod = "/pb.gubernator.V1/GetRateLimits"
)

// appendEnvoy appends an envoy.service.ratelimit.v3.RateLimitRequest: one
// descriptor with one entry key=value, and hits_addend when hits > 1.
func appendEnvoy(b []byte, domain, key string, value []byte, hits uint32) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(value))
	desc := protowire.SizeTag(1) + protowire.SizeBytes(entry)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // descriptors
	b = protowire.AppendVarint(b, uint64(desc))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // entries
	b = protowire.AppendVarint(b, uint64(entry))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, value)
	if hits > 1 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(hits))
	}
	return b
}

// Gubernator's behaviours the generator can ask for.
const (
	gubernatorBatching = 0
	gubernatorGlobal   = 2
)

// appendGubernator appends a pb.gubernator.GetRateLimitsReq with one
// token-bucket RateLimitReq.
func appendGubernator(b []byte, name string, key []byte, hits, limit, durationMs int64, behavior uint64) []byte {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(name)) + protowire.SizeTag(2) + protowire.SizeBytes(len(key)) +
		protowire.SizeTag(3) + protowire.SizeVarint(uint64(hits)) + protowire.SizeTag(4) + protowire.SizeVarint(uint64(limit)) +
		protowire.SizeTag(5) + protowire.SizeVarint(uint64(durationMs))
	if behavior != 0 {
		n += protowire.SizeTag(7) + protowire.SizeVarint(behavior)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType) // requests
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, key)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(hits))
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(limit))
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(durationMs))
	if behavior != 0 {
		b = protowire.AppendTag(b, 7, protowire.VarintType)
		b = protowire.AppendVarint(b, behavior)
	}
	return b
}

// verdict is what an answer said.
type verdict uint8

const (
	admitted verdict = iota + 1
	refused
)

var errNoVerdict = errors.New("answer carries no decision")

// envoyVerdict reads overall_code (1 OK, 2 OVER_LIMIT) from a
// RateLimitResponse.
func envoyVerdict(b []byte) (verdict, error) {
	code, err := firstVarint(b, 1)
	if err != nil {
		return 0, err
	}
	switch code {
	case 1:
		return admitted, nil
	case 2:
		return refused, nil
	}
	return 0, fmt.Errorf("overall_code %d: %w", code, errNoVerdict)
}

// gubernatorVerdict reads the first RateLimitResp of a GetRateLimitsResp:
// status 0 UNDER_LIMIT, 1 OVER_LIMIT; a non-empty error field is an error.
func gubernatorVerdict(b []byte) (verdict, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			resp, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			if msg, err := firstString(resp, 5); err != nil {
				return 0, err
			} else if msg != "" {
				return 0, fmt.Errorf("gubernator: %s", msg)
			}
			status, err := firstVarint(resp, 1)
			if err != nil {
				return 0, err
			}
			if status == 1 {
				return refused, nil
			}
			return admitted, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return 0, errNoVerdict
}

// firstVarint returns varint field num of message b (0 when absent, as
// proto3 leaves defaults out).
func firstVarint(b []byte, num protowire.Number) (uint64, error) {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return 0, protowire.ParseError(k)
		}
		b = b[k:]
		if n == num && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			return v, nil
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return 0, nil
}

// firstString returns string field num of message b ("" when absent).
func firstString(b []byte, num protowire.Number) (string, error) {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return "", protowire.ParseError(k)
		}
		b = b[k:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return "", protowire.ParseError(m)
			}
			return string(v), nil
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return "", protowire.ParseError(m)
		}
		b = b[m:]
	}
	return "", nil
}

// rawCodec hands pre-encoded bytes to gRPC and takes answers as bytes.
// Its name is "proto", so the content type is the one servers expect.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("loadgen: raw codec cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("loadgen: raw codec cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
