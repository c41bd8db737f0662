package rls

import (
	"net/http"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/velvetrope/velvetrope/internal/strictjson"
)

// JSONHandler serves POST /json as Envoy's ratelimit service does: the
// protojson form of a RateLimitRequest in, of the RateLimitResponse out,
// with HTTP 200 when OK, 429 when over the limit, 400 for a malformed
// request and 413 for a body above maxBody bytes.
//
// The body is decoded strictly (strictjson): each field by its JSON or
// its proto name, not both, not twice, in its exact case; UTF-8 only; and
// within the server's bounds, checked as the body is scanned, before
// protojson builds a message of it.
func JSONHandler(s *Server, maxBody int64) http.Handler {
	schema := strictjson.MustForProto(&rlsv3.RateLimitRequest{}, strictjson.DescriptorBounds(s.opts.Bounds)...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := schema.Read(w, r, maxBody, &req); err != nil {
			e := err.(*strictjson.Error)
			if e.Status == http.StatusRequestEntityTooLarge {
				http.Error(w, "request body above the limit of "+strconv.FormatInt(maxBody, 10)+" bytes", e.Status)
				return
			}
			http.Error(w, "invalid RateLimitRequest JSON: "+e.Error(), e.Status)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusInternalServerError
			if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
