package config

import "fmt"

// MaxDescriptors is the most descriptors limits.max_descriptors may allow
// in one request, and MaxEntries the most entries limits.max_entries may
// allow in one descriptor: enough for any real hierarchy, small enough
// that a hostile request cannot make a decision expensive. Engines size
// their per-request arrays by them.
const (
	MaxDescriptors = 32
	MaxEntries     = 16
)

// DefaultLimits are the request bounds of every surface and engine unless
// configured: generous for real traffic (an IPv6 address is 39 bytes, a
// JWT subject rarely above 100, a route path rarely above 500), and the
// largest delta they allow stays near 19 KiB.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{MaxDescriptors: 16, MaxEntries: 8, MaxKeyBytes: 128, MaxValueBytes: 1024, MaxRequestIDBytes: 128}
}

// WithDefaults returns l with its zero fields set to [DefaultLimits].
func (l LimitsConfig) WithDefaults() LimitsConfig {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.MaxDescriptors, d.MaxDescriptors)
	set(&l.MaxEntries, d.MaxEntries)
	set(&l.MaxKeyBytes, d.MaxKeyBytes)
	set(&l.MaxValueBytes, d.MaxValueBytes)
	set(&l.MaxRequestIDBytes, d.MaxRequestIDBytes)
	return l
}

// Validate reports the first bound of l out of range, or bounds that would
// let a request make a delta larger than the pipeline carries
// ([MaxDescriptorBytes]), as an *[Error] whose Key names the setting
// (max_entries; [App.Validate] reports it as limits.max_entries).
func (l LimitsConfig) Validate() error {
	if p, ok := l.problem(); ok {
		return &Error{Key: p.field, Msg: p.msg}
	}
	return nil
}

// problem is the first bound of l out of range, keyed by its setting
// within the limits section.
func (l LimitsConfig) problem() (problem, bool) {
	bad := func(field, format string, args ...any) (problem, bool) {
		return problem{field, fmt.Sprintf(format, args...)}, true
	}
	switch {
	case l.MaxDescriptors < 1 || l.MaxDescriptors > MaxDescriptors:
		return bad("max_descriptors", "must be between 1 and %d, got %d", MaxDescriptors, l.MaxDescriptors)
	case l.MaxEntries < 1 || l.MaxEntries > MaxEntries:
		return bad("max_entries", "must be between 1 and %d, got %d", MaxEntries, l.MaxEntries)
	case l.MaxKeyBytes < 1:
		return bad("max_key_bytes", "must be > 0, got %d", l.MaxKeyBytes)
	case l.MaxValueBytes < 1:
		return bad("max_value_bytes", "must be > 0, got %d", l.MaxValueBytes)
	case l.MaxRequestIDBytes < 1 || l.MaxRequestIDBytes > 1024:
		return bad("max_request_id_bytes", "must be between 1 and 1024, got %d", l.MaxRequestIDBytes)
	}
	if n := l.MaxEntries * (l.MaxKeyBytes + l.MaxValueBytes + 2); n > MaxDescriptorBytes {
		return bad("max_entries/max_key_bytes/max_value_bytes", "max_entries × (max_key_bytes + max_value_bytes + 2) = %d: above %d, a delta would exceed the record bound", n, MaxDescriptorBytes)
	}
	return problem{}, false
}
