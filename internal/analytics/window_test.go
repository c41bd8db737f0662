package analytics

import (
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestParseWindowBounds: at 0, at the bound, one past it and where the
// arithmetic used to wrap around, for both forms (days, Go durations) and
// two bounds (the default analytics.max_window and the largest one).
func TestParseWindowBounds(t *testing.T) {
	const week, month = 7 * day, MaxWindow
	tests := []struct {
		s    string
		max  time.Duration
		want time.Duration // 0: refused
		msg  string
	}{
		{"0d", week, 0, "want 1m to 7d, got 0d"},
		{"0s", week, 0, "want 1m to 7d"},
		{"59s", week, 0, "want 1m to 7d"},
		{"1m", week, time.Minute, ""},
		{"7d", week, week, ""},
		{"168h", week, week, ""},
		{"168h0m0.000000001s", week, 0, "at most 7d here (analytics.max_window)"},
		{"8d", week, 0, "at most 7d here (analytics.max_window), got 8d"},
		{"31d", month, month, ""},
		{"744h", month, month, ""},
		{"32d", month, 0, "at most 31d here"},
		{"31d", 40 * day, month, ""}, // max itself is bounded by MaxWindow
		{"32d", 40 * day, 0, "at most 31d here"},
		{"768614336404564651d", week, 0, "at most 7d here (analytics.max_window), got 768614336404564651d"},
		{"106751d", week, 0, "at most 7d here"},
		{"9223372036854775807d", week, 0, "at most 7d here"},
		{"9223372036854775808d", week, 0, "at most 7d here"},
		{"99999999999999999999999d", week, 0, "at most 7d here"},
		{"2562048h", week, 0, "at most 7d here"},
		{"99999999999999999999h", week, 0, "at most 7d here"},
		{"9223372036854775807ns", week, 0, "at most 7d here"},
		{"-1d", week, 0, "want 1m to 7d"},
		{"-9223372036854775809d", week, 0, "want 1m to 7d"},
		{"-99999999999999999999h", week, 0, "want 1m to 7d"},
		{"1.5d", week, 0, "want a duration such as"},
		{"d", week, 0, "want a duration such as"},
		{"soon", week, 0, "want a duration such as"},
		{"1x", week, 0, "want a duration such as"},
	}
	for i, tc := range tests {
		got, err := ParseWindow(tc.s, tc.max)
		switch {
		case tc.want != 0 && (err != nil || got != tc.want):
			t.Errorf("step %d %q (max %v): got %v %v, want %v", i, tc.s, tc.max, got, err, tc.want)
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("step %d %q (max %v): got %v %v, want an error containing %q", i, tc.s, tc.max, got, err, tc.msg)
		}
	}
}

// TestWindowAboveMaxIs400: through the handler, the window that wrapped
// around is a 400 naming the field and the setting, never a query.
func TestWindowAboveMaxIs400(t *testing.T) {
	mux := http.NewServeMux()
	New(nil, "analytics off", nil).Register(mux)
	for _, w := range []string{"768614336404564651d", "9223372036854775808d", "2562048h", "8d"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/analytics/top-denied?window="+w, nil))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "window: at most 7d here (analytics.max_window), got "+w) {
			t.Errorf("window=%s: got %d %s, want 400 naming window and analytics.max_window", w, rec.Code, rec.Body)
		}
	}
}

// FuzzParseWindow: whatever the text, a window is refused or lies in
// [MinWindow, max]; a number of days is accepted exactly when days × 24 h,
// computed without overflow, lies there, and then is that value.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"1h", "7d", "768614336404564651d", "9223372036854775808d", "2562048h", "-1d", "+3d", "1.5h", "1h30m", "0x10d", "1_0d", "٣d"} {
		f.Add(s, int64(7*day))
	}
	f.Fuzz(func(t *testing.T, s string, maxNS int64) {
		max := min(max(time.Duration(maxNS), MinWindow), MaxWindow)
		got, err := ParseWindow(s, max)
		if err == nil && (got < MinWindow || got > max) {
			t.Fatalf("%q (max %v): %v out of range", s, max, got)
		}
		days, ok := strings.CutSuffix(s, "d")
		if !ok {
			return
		}
		n, isInt := new(big.Int).SetString(days, 10)
		if !isInt {
			return
		}
		want := new(big.Int).Mul(n, big.NewInt(int64(day)))
		inRange := want.Cmp(big.NewInt(int64(MinWindow))) >= 0 && want.Cmp(big.NewInt(int64(max))) <= 0
		switch {
		case inRange && (err != nil || big.NewInt(int64(got)).Cmp(want) != 0):
			t.Fatalf("%q (max %v): got %v %v, want %v", s, max, got, err, want)
		case !inRange && err == nil:
			t.Fatalf("%q (max %v): accepted %v, out of range (%v)", s, max, got, want)
		}
	})
}
