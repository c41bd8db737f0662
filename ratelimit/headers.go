package ratelimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SetHeaders writes the rate limit response fields for d: the IETF
// RateLimit-Policy (every limited descriptor) and RateLimit (the most
// restrictive one), the common X-RateLimit-Limit/Remaining/Reset, and
// Retry-After (whole seconds, rounded up) when the request is refused and
// waiting can help; RateLimit-Over-Soft and RateLimit-Elastic (the rule
// ids) when a soft throttle admitted it over the base limit or an elastic
// rule borrowed from its pool for it; RateLimit-Lease (the lease ids,
// as structured-field strings) when concurrency rules admitted it.
func SetHeaders(h http.Header, d *Decision) {
	var policies, soft, elastic, leases []string
	var tight *Status
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Rule == nil || st.Rule.Unlimited {
			continue
		}
		if st.OverSoft {
			soft = append(soft, sfString(st.Rule.ID))
		}
		if st.Elastic {
			elastic = append(elastic, sfString(st.Rule.ID))
		}
		if st.Lease != "" {
			leases = append(leases, sfString(st.Lease))
		}
		policies = append(policies, fmt.Sprintf("%s;q=%d;w=%d", sfString(st.Rule.ID), st.Limit, int64(st.Rule.Window/time.Second)))
		switch {
		case tight == nil,
			st.Code != OK && tight.Code == OK,
			st.Code == tight.Code && st.Remaining < tight.Remaining:
			tight = st
		}
	}
	if tight == nil {
		return
	}
	reset := CeilSeconds(tight.ResetAfter)
	h.Set("RateLimit-Policy", strings.Join(policies, ", "))
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", sfString(tight.Rule.ID), tight.Remaining, reset))
	h.Set("X-RateLimit-Limit", strconv.FormatInt(tight.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(tight.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	if len(soft) > 0 {
		h.Set("RateLimit-Over-Soft", strings.Join(soft, ", "))
	}
	if len(elastic) > 0 {
		h.Set("RateLimit-Elastic", strings.Join(elastic, ", "))
	}
	if len(leases) > 0 {
		h.Set("RateLimit-Lease", strings.Join(leases, ", "))
	}
	if d.Code != OK {
		if wait, never := d.RetryAfter(); !never {
			h.Set("Retry-After", strconv.FormatInt(max(CeilSeconds(wait), 1), 10))
		}
	}
}

// CeilSeconds is d in whole seconds, rounded up (0 for d <= 0): what the
// rate limit headers and Envoy's whole-second resets show.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// sfString quotes s as an RFC 8941 structured-field string: printable
// ASCII only, with '"' and '\' escaped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
