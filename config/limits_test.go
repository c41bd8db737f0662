package config

import (
	"errors"
	"testing"
)

// TestLimitsValidate: the request bounds are refused outside their ranges
// and when max_entries × (max_key_bytes + max_value_bytes + 2) passes
// MaxDescriptorBytes, each naming its setting; the defaults and the widest
// bounds that fit are accepted.
func TestLimitsValidate(t *testing.T) {
	widest := LimitsConfig{MaxDescriptors: MaxDescriptors, MaxEntries: MaxEntries, MaxKeyBytes: 128, MaxRequestIDBytes: 1024}
	widest.MaxValueBytes = MaxDescriptorBytes/widest.MaxEntries - widest.MaxKeyBytes - 2
	over := widest
	over.MaxValueBytes++
	d := DefaultLimits()
	with := func(f func(*LimitsConfig)) LimitsConfig { l := d; f(&l); return l }
	cases := []struct {
		name string
		l    LimitsConfig
		want string // the error's text; "" accepted
	}{
		{"defaults", d, ""},
		{"widest", widest, ""},
		{"one byte over the record bound", over, "max_entries/max_key_bytes/max_value_bytes: max_entries × (max_key_bytes + max_value_bytes + 2) = 12304: above 12288, a delta would exceed the record bound"},
		{"zero descriptors", with(func(l *LimitsConfig) { l.MaxDescriptors = 0 }), "max_descriptors: must be between 1 and 32, got 0"},
		{"descriptors past the maximum", with(func(l *LimitsConfig) { l.MaxDescriptors = MaxDescriptors + 1 }), "max_descriptors: must be between 1 and 32, got 33"},
		{"entries past the maximum", with(func(l *LimitsConfig) { l.MaxEntries = MaxEntries + 1 }), "max_entries: must be between 1 and 16, got 17"},
		{"zero key bytes", with(func(l *LimitsConfig) { l.MaxKeyBytes = 0 }), "max_key_bytes: must be > 0, got 0"},
		{"negative value bytes", with(func(l *LimitsConfig) { l.MaxValueBytes = -1 }), "max_value_bytes: must be > 0, got -1"},
		{"request ids past 1024 bytes", with(func(l *LimitsConfig) { l.MaxRequestIDBytes = 1025 }), "max_request_id_bytes: must be between 1 and 1024, got 1025"},
	}
	for i, c := range cases {
		err := c.l.Validate()
		got := ""
		if err != nil {
			got = err.Error()
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("step %d (%s): got a %T, want a *config.Error", i, c.name, err)
			}
		}
		if got != c.want {
			t.Errorf("step %d (%s): got %q, want %q", i, c.name, got, c.want)
		}
	}
}

// TestLimitsWithDefaults: zero fields take DefaultLimits, set ones stay.
func TestLimitsWithDefaults(t *testing.T) {
	if got, want := (LimitsConfig{}).WithDefaults(), DefaultLimits(); got != want {
		t.Fatalf("zero limits with defaults: got %+v, want %+v", got, want)
	}
	l := LimitsConfig{MaxEntries: 3, MaxRequestIDBytes: 7}.WithDefaults()
	want := DefaultLimits()
	want.MaxEntries, want.MaxRequestIDBytes = 3, 7
	if l != want {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	if DefaultApp().Limits != DefaultLimits() {
		t.Fatalf("the application's default limits %+v are not DefaultLimits %+v", DefaultApp().Limits, DefaultLimits())
	}
}
