package rls

import (
	"context"
	"errors"
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// ChargeService names the gRPC service of costs charged after the
// response, for callers that are not Envoy: velvetrope.v1.Charges/Charge
// takes Envoy's RateLimitRequest (domain, descriptors, hits_addend, and
// per-descriptor hits_addend and limit) and answers its
// RateLimitResponse, whose codes are always OK (a charge is never refused)
// and whose limit_remaining say what remains after it. The request id
// that makes a charge idempotent travels in the RequestIDMetadata
// metadata (RateLimitRequest has no field for it).
//
// ChargeMarker, the key of a descriptor's last entry, makes a
// ShouldRateLimit call a charge: Envoy's `apply_on_stream_done` call,
// whose hits_addend is the response's cost, is then counted whatever the
// counters hold under every rule (Envoy-semantics rules count every call
// anyway; an algorithm rule counts nothing a refused call asks). The
// entry is dropped before matching: the descriptor names the same counter
// as without it.
const (
	ChargeMarker       = "velvetrope_charge"
	ChargeService      = "velvetrope.v1.Charges"
	ChargeMethod       = "/" + ChargeService + "/Charge"
	RequestIDMetadata  = "velvetrope-request-id"
	chargeMethodName   = "Charge"
	errChargeNoRequest = "charge: the request must not be empty"
)

// chargeProto is the service's descriptor, registered in the global
// registry so that server reflection describes it (grpcurl calls it as
// it is); its messages are Envoy's.
const chargeProto = "velvetrope/v1/charges.proto"

func init() {
	rls := rlsv3.File_envoy_service_ratelimit_v3_rls_proto
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String(chargeProto),
		Package:    proto.String("velvetrope.v1"),
		Dependency: []string{rls.Path()},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Charges"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name:       proto.String(chargeMethodName),
				InputType:  proto.String(".envoy.service.ratelimit.v3.RateLimitRequest"),
				OutputType: proto.String(".envoy.service.ratelimit.v3.RateLimitResponse"),
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err == nil {
		err = protoregistry.GlobalFiles.RegisterFile(fd)
	}
	if err != nil {
		panic("rls: the charge service's descriptor: " + err.Error()) // a programming error every test meets
	}
}

// RegisterCharges registers the charge service of s on g (NewGRPCServer
// does).
func RegisterCharges(g *grpc.Server, s *Server) {
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: ChargeService,
		HandlerType: (*any)(nil),
		Metadata:    chargeProto,
		Methods: []grpc.MethodDesc{{MethodName: chargeMethodName, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(rlsv3.RateLimitRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			if ic == nil {
				return s.Charge(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: ChargeMethod}
			return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return s.Charge(ctx, req.(*rlsv3.RateLimitRequest))
			})
		}}},
	}, s)
}

// Charge counts req's hits after the response (ratelimit.Request.Charge):
// never refused. Malformed requests get InvalidArgument naming the field;
// a request id used by another charge FailedPrecondition; a store that
// cannot take a `mode: sync` rule's charge Unavailable, with nothing
// counted (retry with the same request id).
func (s *Server) Charge(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req == nil {
		return nil, status.Error(codes.InvalidArgument, errChargeNoRequest)
	}
	w := s.work.Get().(*work)
	defer s.putWork(w)
	rs := s.c.Rules()
	if err := w.convert(req, s.overrides, rs, &s.opts.Bounds); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	w.req.Charge = true
	if req.HitsAddend == 0 && !anyHits(req) {
		return nil, status.Error(codes.InvalidArgument, "hits_addend: required: the cost to charge")
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if ids := md.Get(RequestIDMetadata); len(ids) > 0 {
			if len(ids) > 1 {
				return nil, status.Errorf(codes.InvalidArgument, "%s: one request id, got %d", RequestIDMetadata, len(ids))
			}
			w.req.RequestID = ids[0]
		}
	}
	if err := s.c.Check(ctx, &w.req, &w.d); err != nil {
		var fe *ratelimit.FieldError
		switch {
		case errors.As(err, &fe) && (errors.Is(err, ratelimit.ErrRequestIDConflict) || errors.Is(err, ratelimit.ErrRequestIDInFlight)):
			return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("%s: %v", RequestIDMetadata, fe.Err))
		case errors.As(err, &fe) && fe.Field == "request_id":
			return nil, status.Error(codes.InvalidArgument, RequestIDMetadata+": "+fe.Err.Error())
		case errors.As(err, &fe):
			return nil, status.Error(codes.InvalidArgument, fe.Error())
		case errors.Is(err, counters.ErrStoreUnavailable):
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		s.log.Warn("Charge failed", "domain", w.req.Domain, "error", err)
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(w.d.Statuses))}
	for i := range w.d.Statuses {
		st, lim := new(rlsv3.RateLimitResponse_DescriptorStatus), new(rlsv3.RateLimitResponse_RateLimit)
		fill(st, lim, &w.d.Statuses[i])
		resp.Statuses[i] = st
	}
	return resp, nil
}

// anyHits says a descriptor of req carries its own hits_addend.
func anyHits(req *rlsv3.RateLimitRequest) bool {
	for _, d := range req.Descriptors {
		if d != nil && d.HitsAddend != nil {
			return true
		}
	}
	return false
}
