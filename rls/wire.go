package rls

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// The gRPC path reads RateLimitRequest and writes RateLimitResponse by
// hand: the generated code unmarshals every call into a tree of fresh
// messages and the handler built another tree for the answer, which the
// profile of a loaded checker showed as a fifth of its allocations. Here
// a call's bytes stay in gRPC's buffer, held for the call (or are copied
// into its pooled work when gRPC hands them in pieces); the request's
// strings alias them for the length of the call (the checker copies what
// it keeps), and the answer is written into a pooled buffer that gRPC
// hands back once it is on the wire. wire_test.go holds both to the generated
// types: same request, same answer.

// codec is the server's codec: Envoy's messages as bytes this file reads
// and writes, everything else (the health service) as protobuf.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.NewBuffer(b, answers)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*work); ok {
		if len(data) == 1 {
			// the message is one buffer (gRPC reads it so): hold it for
			// the call instead of copying it; putWork frees it
			data.Ref()
			w.held, w.raw = data, data[0].ReadOnlyData()
			return nil
		}
		n := data.Len()
		w.raw = slices.Grow(w.own[:0], n)[:n]
		data.CopyTo(w.raw)
		w.own = w.raw
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (codec) Name() string { return "proto" }

// answerPool keeps the buffers answers are written into; gRPC returns
// each once written (mem.NewBuffer).
type answerPool struct{ p sync.Pool }

func (a *answerPool) Get(length int) *[]byte {
	b, _ := a.p.Get().(*[]byte)
	if b == nil {
		// at least gRPC's pooling threshold: a smaller buffer would not
		// come back (mem.NewBuffer)
		s := make([]byte, 0, max(length, 1<<10))
		b = &s
	}
	*b = slices.Grow((*b)[:0], length)[:length]
	return b
}

func (a *answerPool) Put(b *[]byte) {
	if cap(*b) <= 64<<10 { // a huge answer (many response headers) is not kept
		a.p.Put(b)
	}
}

var answers = &answerPool{}

// serviceDesc registers ShouldRateLimit with the handler below in place of
// the generated one (same service, method and wire format).
func (s *Server) serviceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
		HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: s.handle}},
		Metadata:    rlsv3.RateLimitService_ServiceDesc.Metadata,
	}
}

func (s *Server) handle(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
	w := s.work.Get().(*work)
	defer s.putWork(w)
	if err := dec(w); err != nil {
		return nil, err
	}
	if ic == nil {
		return s.serveWire(ctx, w)
	}
	// an interceptor sees the call's work, not a generated message
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return ic(ctx, w, info, func(ctx context.Context, _ any) (any, error) { return s.serveWire(ctx, w) })
}

// serveWire decides the request in w.raw and writes the answer.
func (s *Server) serveWire(ctx context.Context, w *work) (any, error) {
	rs := s.c.Rules()
	if err := w.parse(s.overrides, rs, &s.opts.Bounds); err != nil {
		s.Stats.Invalid.Add(1)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	known, err := s.decide(ctx, w, rs)
	if err != nil {
		return nil, err
	}
	if !known {
		s.markUnknown(ctx, rs)
	}
	b := answers.Get(0)
	*b = w.appendAnswer(*b, known, s.opts.ResponseHeaders)
	return b, nil
}

var (
	errMalformed = errors.New("not a well-formed RateLimitRequest")
	errUTF8      = errors.New("not valid UTF-8")
)

// parse reads the RateLimitRequest in w.raw into w.req, with the checks
// and errors of convert. The bounds on descriptors and entries are
// checked as the first pass counts them: it stops at the first one past
// them, before anything is reserved (a 1 MiB message of 500,000 empty
// entries is refused at the ninth).
func (w *work) parse(o *overrides, rs *config.RuleSet, b *config.LimitsConfig) error {
	var domain []byte
	var hitsAddend uint64
	descriptors := 0
	// first pass: the top-level fields, the sizes to reserve, and the
	// first descriptor without entries (convert's order of errors)
	entriesN, empty := 0, -1
	err := fields(w.raw, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			domain = v
		case num == 2 && typ == protowire.BytesType:
			if descriptors == b.MaxDescriptors {
				return errTooManyDescriptors(b)
			}
			n := 0
			err := fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) error {
				if num == 1 && typ == protowire.BytesType {
					if n == b.MaxEntries {
						return errTooManyEntries(descriptors, b)
					}
					n++
				}
				return nil
			})
			if n == 0 && empty < 0 {
				empty = descriptors
			}
			entriesN += n
			descriptors++
			return err
		case num == 3 && typ == protowire.VarintType:
			hitsAddend = x
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case !utf8.Valid(domain):
		return &fieldError{"domain", errUTF8}
	case hitsAddend > 1<<32-1:
		return fieldf("hits_addend", "above %d (got %d)", uint32(1<<32-1), hitsAddend)
	}
	dom := alias(domain)
	if err := checkShape(dom, descriptors, b); err != nil {
		return err
	}
	if empty >= 0 {
		return fieldf(index("descriptors", empty, "entries"), "must not be empty")
	}
	if cap(w.entries) < entriesN {
		w.entries = make([]config.Entry, entriesN)
	}
	entries := w.entries[:entriesN]
	w.start(dom, uint32(hitsAddend))
	known := rs.HasDomain(dom)
	i := 0
	return fields(w.raw, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		n := 0
		var lim *ratelimitv3.RateLimitDescriptor_RateLimitOverride
		var hits *uint64
		negative := false
		err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				e, err := entry(v)
				if err != nil {
					return err
				}
				entries[n] = e
				n++
			case num == 2 && typ == protowire.BytesType:
				l, err := override(v)
				if err != nil {
					return err
				}
				lim = l
			case num == 3 && typ == protowire.BytesType:
				h, err := wrapped(v)
				if err != nil {
					return err
				}
				hits = &h
			case num == 4 && typ == protowire.VarintType:
				negative = x != 0
			}
			return nil
		})
		if err != nil {
			return err
		}
		es := entries[:n]
		entries = entries[n:]
		err = w.add(i, es, lim, hits, negative, o, rs, known, b)
		i++
		return err
	})
}

// maxPooledRaw is the largest request buffer a pooled work keeps: real
// requests are a few hundred bytes; a large one (an attack, or a request
// the bounds refuse) is not held for the next call.
const maxPooledRaw = 64 << 10

// putWork returns w to the pool, without the memory of a large request,
// and hands the message it held back to gRPC.
func (s *Server) putWork(w *work) {
	if w.held != nil {
		w.held.Free()
		w.held = nil
	}
	w.raw = nil
	if cap(w.own) > maxPooledRaw {
		w.own = nil
	}
	s.work.Put(w)
}

// fieldError is a field name and what is wrong with it.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// entry reads a RateLimitDescriptor.Entry (key 1, value 2); its strings
// alias the call's bytes.
func entry(b []byte) (config.Entry, error) {
	var e config.Entry
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.Key = alias(v)
		case num == 2 && typ == protowire.BytesType:
			e.Value = alias(v)
		}
		return nil
	})
	return e, err
}

// override reads a RateLimitOverride (requests_per_unit 1, unit 2,
// unit_multiplier 3); a request that carries one allocates it.
func override(b []byte) (*ratelimitv3.RateLimitDescriptor_RateLimitOverride, error) {
	l := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			l.RequestsPerUnit = uint32(x)
		case num == 2 && typ == protowire.VarintType:
			l.Unit = typev3.RateLimitUnit(int32(x))
		case num == 3 && typ == protowire.BytesType:
			m, err := wrapped(v)
			if err != nil {
				return err
			}
			l.UnitMultiplier = wrapperspb.UInt32(uint32(m))
		}
		return nil
	})
	return l, err
}

// wrapped reads the value (field 1) of a UInt64Value or UInt32Value.
func wrapped(b []byte) (uint64, error) {
	var out uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		if num == 1 && typ == protowire.VarintType {
			out = x
		}
		return nil
	})
	return out, err
}

// fields calls fn for every field of message b: length-delimited values
// as v, varints as x; other wire types are skipped, as unknown fields are.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// alias is b as a string without a copy: valid while the call's bytes are.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// appendAnswer writes the RateLimitResponse for w's decision (known false:
// every descriptor OK with no limit).
func (w *work) appendAnswer(b []byte, known, withHeaders bool) []byte {
	overall := rlsv3.RateLimitResponse_OK
	if known && w.d.Code != ratelimit.OK { // a defer is OVER_LIMIT: Envoy has no such answer
		overall = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(overall))
	for i := range w.req.Descriptors {
		v := statusView{code: rlsv3.RateLimitResponse_OK}
		if known {
			v = view(&w.d.Statuses[i])
		}
		b = appendStatus(b, &v)
	}
	if known && withHeaders {
		for _, h := range headers(&w.d) {
			n := protowire.SizeTag(1) + protowire.SizeBytes(len(h.Key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(h.Value))
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(n))
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendString(b, h.Key)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendString(b, h.Value)
		}
	}
	return b
}

// appendStatus writes one DescriptorStatus (field 2 of the response).
func appendStatus(b []byte, v *statusView) []byte {
	var limit, reset int
	secs, nanos := int64(v.reset/time.Second), int32(v.reset%time.Second)
	if v.limited {
		limit = sizeVarint(1, uint64(v.perUnit)) + sizeVarint(2, uint64(v.unit))
		if v.name != "" {
			limit += protowire.SizeTag(3) + protowire.SizeBytes(len(v.name))
		}
		reset = sizeVarint(1, uint64(secs)) + sizeVarint(2, uint64(nanos))
	}
	n := sizeVarint(1, uint64(v.code)) + sizeVarint(3, uint64(v.remaining))
	if v.limited {
		n += protowire.SizeTag(2) + protowire.SizeBytes(limit) + protowire.SizeTag(4) + protowire.SizeBytes(reset)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendVarint(b, 1, uint64(v.code))
	if v.limited {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limit))
		b = appendVarint(b, 1, uint64(v.perUnit))
		b = appendVarint(b, 2, uint64(v.unit))
		if v.name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, v.name)
		}
	}
	b = appendVarint(b, 3, uint64(v.remaining))
	if v.limited {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(reset))
		b = appendVarint(b, 1, uint64(secs))
		b = appendVarint(b, 2, uint64(nanos))
	}
	return b
}

// appendVarint writes varint field num, left out when 0 (proto3).
func appendVarint(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

func sizeVarint(num protowire.Number, x uint64) int {
	if x == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(x)
}
