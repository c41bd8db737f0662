package doctest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// request is what a curl command line sends.
type request struct {
	method, url string
	header      http.Header
	body        []byte // nil: none
}

// parseCurl reads curl's arguments (words[0] is curl) as curl does for the
// flags the docs use, and refuses any other: the tests must never run a
// request other than the one a reader's curl sends. readFile resolves
// @FILE arguments (relative to the reader's working directory).
//
// As curl: -d/--data/--data-ascii strip CR and LF from an @FILE,
// --data-binary keeps them, --data-raw takes @ literally; several data
// arguments are joined with '&'; data makes the method POST (unless -X)
// and the Content-Type application/x-www-form-urlencoded (unless -H sets
// it). -s, -S and -i change only what curl prints.
func parseCurl(words []string, readFile func(string) ([]byte, error)) (request, error) {
	r := request{header: http.Header{}}
	var data [][]byte
	method := ""
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("curl %s: missing its argument", w)
			}
			i++
			return words[i], nil
		}
		flag, value, attached := w, "", false
		if len(w) > 2 && w[0] == '-' && w[1] != '-' && strings.IndexByte("XHd", w[1]) >= 0 {
			flag, value, attached = w[:2], w[2:], true // -XPOST, -HName:v, -d@file
		}
		get := func() (string, error) {
			if attached {
				return value, nil
			}
			return arg()
		}
		switch flag {
		case "-s", "--silent", "-S", "--show-error", "-i", "--include", "-sS", "-Ss":
		case "-X", "--request":
			v, err := get()
			if err != nil {
				return r, err
			}
			method = v
		case "-H", "--header":
			v, err := get()
			if err != nil {
				return r, err
			}
			name, val, ok := strings.Cut(v, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return r, fmt.Errorf("curl -H %q: want Name: value", v)
			}
			r.header.Add(strings.TrimSpace(name), strings.TrimSpace(val))
		case "-d", "--data", "--data-ascii", "--data-binary", "--data-raw":
			v, err := get()
			if err != nil {
				return r, err
			}
			b := []byte(v)
			if file, ok := strings.CutPrefix(v, "@"); ok && flag != "--data-raw" {
				if b, err = readFile(file); err != nil {
					return r, fmt.Errorf("curl %s @%s: %w", flag, file, err)
				}
				if flag != "--data-binary" {
					b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
				}
			}
			data = append(data, b)
		default:
			if strings.HasPrefix(w, "-") {
				return r, fmt.Errorf("curl flag %q: not one the doc tests know (add it to parseCurl, as curl reads it)", w)
			}
			if r.url != "" {
				return r, fmt.Errorf("curl: two URLs, %q and %q", r.url, w)
			}
			r.url = w
		}
	}
	if r.url == "" {
		return r, errors.New("curl: no URL")
	}
	if !strings.HasPrefix(r.url, "http://") && !strings.HasPrefix(r.url, "https://") {
		return r, fmt.Errorf("curl: URL %q has no http:// or https://", r.url)
	}
	if data != nil {
		r.body = bytes.Join(data, []byte("&"))
		if r.header.Get("Content-Type") == "" {
			r.header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	switch {
	case method != "":
		r.method = method
	case data != nil:
		r.method = http.MethodPost
	default:
		r.method = http.MethodGet
	}
	return r, nil
}

func TestParseCurl(t *testing.T) {
	files := map[string]string{"rules/api.yaml": "domain: api\ndescriptors: []\n"}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	w := strings.Fields
	tests := []struct {
		args   []string // the words after curl
		method string
		url    string
		header http.Header
		body   string // "<nil>" for none
		err    string
	}{
		{args: w("-s http://h/a"), method: "GET", url: "http://h/a", header: http.Header{}, body: "<nil>"},
		{args: w("-s -X POST http://h/v1/check -d {}"), method: "POST", url: "http://h/v1/check", header: form, body: "{}"},
		{args: w("-d a=1 -d b=2 http://h/"), method: "POST", url: "http://h/", header: form, body: "a=1&b=2"},
		{args: w("-XPUT -d{} http://h/"), method: "PUT", url: "http://h/", header: form, body: "{}"},
		{args: []string{"-H", "Authorization: Bearer t", "-X", "POST", "http://h/"}, method: "POST", url: "http://h/",
			header: http.Header{"Authorization": {"Bearer t"}}, body: "<nil>"},
		{args: []string{"-H", "Content-Type: application/json", "-d", "{}", "http://h/"}, method: "POST", url: "http://h/",
			header: http.Header{"Content-Type": {"application/json"}}, body: "{}"},
		{args: w("--data-binary @rules/api.yaml http://h/"), method: "POST", url: "http://h/", header: form, body: files["rules/api.yaml"]},
		{args: w("-d @rules/api.yaml http://h/"), method: "POST", url: "http://h/", header: form, body: "domain: apidescriptors: []"},
		{args: w("--data-raw @rules/api.yaml http://h/"), method: "POST", url: "http://h/", header: form, body: "@rules/api.yaml"},
		{args: w("-i -S http://h/"), method: "GET", url: "http://h/", header: http.Header{}, body: "<nil>"},
		{args: w("-d @missing http://h/"), err: "curl -d @missing: no such file"},
		{args: w("-k http://h/"), err: `curl flag "-k": not one the doc tests know`},
		{args: w("--json {} http://h/"), err: `curl flag "--json"`},
		{args: w("http://h/ http://g/"), err: "two URLs"},
		{args: w("-s"), err: "no URL"},
		{args: w("localhost:8080/x"), err: "has no http://"},
		{args: w("http://h/ -X"), err: "curl -X: missing its argument"},
		{args: w("-H nocolon http://h/"), err: "want Name: value"},
	}
	for i, tt := range tests {
		r, err := parseCurl(append([]string{"curl"}, tt.args...), read)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%d %q: got error %v, want one containing %q", i, tt.args, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%d %q: %v", i, tt.args, err)
			continue
		}
		body := "<nil>"
		if r.body != nil {
			body = string(r.body)
		}
		if r.method != tt.method || r.url != tt.url || body != tt.body || fmt.Sprint(r.header) != fmt.Sprint(tt.header) {
			t.Errorf("%d %q: got %s %s %v %q; want %s %s %v %q", i, tt.args, r.method, r.url, r.header, body, tt.method, tt.url, tt.header, tt.body)
		}
	}
}
