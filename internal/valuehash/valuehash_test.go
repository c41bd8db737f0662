package valuehash

import "testing"

// TestValue: a keyed hash of 32 hex digits that depends on the key, the
// domain and the entry key as well as the value.
func TestValue(t *testing.T) {
	h, err := New([]byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	base := h.Value("api", "user", "priya")
	if len(base) != 32 || h.Value("api", "user", "priya") != base {
		t.Fatalf("hash %q: want 32 hex digits, stable", base)
	}
	other, _ := New([]byte("other"))
	for name, got := range map[string]string{
		"key":    other.Value("api", "user", "priya"),
		"domain": h.Value("web", "user", "priya"),
		"entry":  h.Value("api", "ip", "priya"),
		"value":  h.Value("api", "user", "priyA"),
	} {
		if got == base {
			t.Errorf("another %s hashes the same", name)
		}
	}
	if h.Random() || other.Random() {
		t.Fatal("a keyed hasher says random")
	}
	r1, _ := New(nil)
	r2, _ := New(nil)
	if !r1.Random() || r1.Value("api", "user", "priya") == r2.Value("api", "user", "priya") {
		t.Fatal("random keys: want Random and different hashes per process")
	}
}
