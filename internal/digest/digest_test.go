package digest

import (
	"bytes"
	"testing"
)

// TestDigest: Size bytes, the same for one key and Digester, different
// for another key or another Digester, and a key aliasing the buffer's
// spare capacity digests as a copy of it does.
func TestDigest(t *testing.T) {
	d, other := New(), New()
	a := d.String("api:user|user=priya")
	if len(a) != Size || d.String("api:user|user=priya") != a {
		t.Fatalf("digest %x: want %d stable bytes", a, Size)
	}
	if d.String("api:user|user=priyA") == a || other.String("api:user|user=priya") == a {
		t.Fatal("another key or another digester gives the same digest")
	}
	buf := append(make([]byte, 0, 64), "prefix"...)
	key := append(buf[len(buf):], "api:user|user=priya"...) // in buf's spare capacity
	got := d.Append(buf, key)
	if !bytes.Equal(got[:6], []byte("prefix")) || string(got[6:]) != a {
		t.Fatalf("aliasing key: got %q", got)
	}
}
