package config

import (
	"strings"
	"testing"
)

// TestAdminTokens: named tokens from the file and from
// VELVETROPE_ADMIN_TOKENS; a name or token that cannot work, or that two
// holders share, is refused naming the entry.
func TestAdminTokens(t *testing.T) {
	a, err := LoadApp("", env(map[string]string{"VELVETROPE_ADMIN_TOKEN": "root-tok", "VELVETROPE_ADMIN_TOKENS": "ci=ci-tok, priya@ops=p=tok"}))
	if err != nil {
		t.Fatal(err)
	}
	got := a.Admin.Named()
	if len(got) != 3 || got[0] != (NamedToken{"admin", "root-tok"}) || got[1] != (NamedToken{"ci", "ci-tok"}) || got[2] != (NamedToken{"priya@ops", "p=tok"}) {
		t.Fatalf("tokens %+v", got)
	}
	cases := []struct{ tokens, want string }{
		{"justatoken", `admin.tokens[0].name: want 1 to 64 of a-z, A-Z, 0-9 and - _ . @ (it is recorded as the author of changes), got ""`},
		{"ci=a,ci=b", `admin.tokens[1].name: "ci" is already the name of admin.tokens[0]`},
		{"admin=x", `admin.tokens[0].name: "admin" is already the name of admin.token`},
		{"ci=a,cd=a", `admin.tokens[1].token: is also admin.tokens[0]'s`},
		{"ci=root-tok", `admin.tokens[0].token: is admin.token's`},
		{"ci=", `admin.tokens[0].token: must not be empty`},
		{"c i=x", `admin.tokens[0].name: want 1 to 64`},
		{"ci=a\tb", `admin.tokens[0].token: must be printable ASCII without spaces`},
	}
	for _, c := range cases {
		_, err := LoadApp("", env(map[string]string{"VELVETROPE_ADMIN_TOKEN": "root-tok", "VELVETROPE_ADMIN_TOKENS": c.tokens}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %s", c.tokens, err, c.want)
		}
	}
}
