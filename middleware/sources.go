package middleware

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Source turns a request into one descriptor entry. ok is false when the
// request does not carry it (no header, no authenticated user): the
// descriptor that needs it is then left out of the call.
type Source func(r *http.Request) (key, value string, ok bool)

// ClientIP is the client address under key "remote_address". The peer
// (r.RemoteAddr) is the client unless it is one of the trusted proxies;
// then the client is the right-most address of Forwarded (for=) or, when
// that header is absent, X-Forwarded-For that is not itself a trusted
// proxy. Headers from untrusted peers are ignored: anyone can send them.
//
// An IPv6 client is keyed by its /64 ("2001:db8:1:2::/64"): one
// subscriber usually holds a whole /64 and could rotate through its
// addresses freely. [ClientIPPrefix] chooses another length.
func ClientIP(trusted ...netip.Prefix) Source { return ClientIPPrefix(DefaultIPv6Prefix, trusted...) }

// DefaultIPv6Prefix is the prefix length ClientIP keys IPv6 clients by.
const DefaultIPv6Prefix = 64

// ClientIPPrefix is ClientIP keying IPv6 clients by their first v6Bits
// bits (128: the full address). IPv4 clients are keyed by their address.
// v6Bits outside 1..128 is taken as 64.
func ClientIPPrefix(v6Bits int, trusted ...netip.Prefix) Source {
	if v6Bits < 1 || v6Bits > 128 {
		v6Bits = DefaultIPv6Prefix
	}
	return func(r *http.Request) (string, string, bool) {
		ip, ok := clientIP(r, trusted)
		if !ok {
			return "", "", false
		}
		if ip.Is6() && v6Bits < 128 {
			p, err := ip.Prefix(v6Bits)
			if err == nil {
				return "remote_address", p.String(), true
			}
		}
		return "remote_address", ip.String(), true
	}
}

func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !isTrusted(peer, trusted) {
		return peer, true
	}
	var hops []string
	if fwd := r.Header.Values("Forwarded"); len(fwd) > 0 {
		for _, line := range fwd {
			for _, elem := range strings.Split(line, ",") {
				for _, pair := range strings.Split(elem, ";") {
					k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
					if strings.EqualFold(k, "for") {
						hops = append(hops, strings.Trim(v, `"`))
					}
				}
			}
		}
	} else {
		for _, line := range r.Header.Values("X-Forwarded-For") {
			for _, h := range strings.Split(line, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
	}
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		ip, ok := parseAddr(hops[i])
		if !ok {
			return last, true // a malformed hop: nothing beyond it can be trusted
		}
		if !isTrusted(ip, trusted) {
			return ip, true
		}
		last = ip
	}
	return last, true // every hop is a proxy: the farthest one is all we know
}

// parseAddr reads "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]:80".
func parseAddr(s string) (netip.Addr, bool) {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	ip, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, false
	}
	// A zone names an interface of the sender: meaningless for a client
	// and a way to mint endless distinct keys.
	return ip.Unmap().WithZone(""), true
}

func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Header is the value of header name under key.
func Header(name, key string) Source {
	return func(r *http.Request) (string, string, bool) {
		v := r.Header.Get(name)
		return key, v, v != ""
	}
}

// APIKey is the API key in header name under key "api_key", replaced by a
// keyed hash (HMAC-SHA256 with secret, 16 bytes in hex) so the key itself
// never leaves the process: not to Kafka, Redis, ClickHouse, logs or
// metrics.
func APIKey(name string, secret []byte) Source {
	return func(r *http.Request) (string, string, bool) {
		v := r.Header.Get(name)
		if v == "" {
			return "", "", false
		}
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(v))
		return "api_key", hex.EncodeToString(m.Sum(nil)[:16]), true
	}
}

// User is the authenticated user under key "user_id", as the
// application's authentication put it in the request context.
func User(fromContext func(context.Context) (string, bool)) Source {
	return func(r *http.Request) (string, string, bool) {
		u, ok := fromContext(r.Context())
		return "user_id", u, ok && u != ""
	}
}

// Method is the HTTP method under key "method".
func Method() Source {
	return func(r *http.Request) (string, string, bool) { return "method", r.Method, true }
}

// Route is the matched route pattern under key "route": r.Pattern (set by
// http.ServeMux) unless pattern says otherwise. The pattern, not the path,
// so /users/{id} is one limit, not one per id.
func Route(pattern func(*http.Request) string) Source {
	return func(r *http.Request) (string, string, bool) {
		p := r.Pattern
		if pattern != nil {
			p = pattern(r)
		}
		return "route", p, p != ""
	}
}
