package ratelimit

import "testing"

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{`api:user_id`: `"api:user_id"`, `a"b\c`: `"a\"b\\c"`, "ü\n": `"???"`} {
		if got := sfString(in); got != want {
			t.Fatalf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}
