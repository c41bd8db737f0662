package testsvc

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreeAddr is a loopback address nothing listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// CleanEnv is this process's environment without any VELVETROPE_*
// variable (a developer's shell must not change what a tested binary
// does), then extra.
func CleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VELVETROPE_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// Process is one running velvetrope process of a test: what it writes is
// kept (the first MiB of each stream, and both in the order written), and
// it is stopped with SIGTERM when the test ends.
type Process struct {
	HTTP string // its HTTP listener, host:port

	cmd  *exec.Cmd
	mu   sync.Mutex
	out  [3]bytes.Buffer // stdout, stderr, both; requires mu held
	done chan struct{}
}

// StartProcess starts cmd, a velvetrope process listening on httpAddr,
// and waits until its /healthz answers 200 and ready (when not nil) says
// so, at most 30 s; the test fails if it exits before.
func StartProcess(t testing.TB, cmd *exec.Cmd, httpAddr string, ready func(*Process) bool) *Process {
	t.Helper()
	p := &Process{HTTP: httpAddr, cmd: cmd, done: make(chan struct{})}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var copies sync.WaitGroup
	keep := func(r io.Reader, stream int) {
		defer copies.Done()
		s := bufio.NewScanner(r)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			p.mu.Lock()
			for _, b := range []*bytes.Buffer{&p.out[stream], &p.out[2]} {
				if b.Len() < 1<<20 {
					b.Write(s.Bytes())
					b.WriteByte('\n')
				}
			}
			p.mu.Unlock()
		}
	}
	copies.Add(2)
	go keep(outR, 0)
	go keep(errR, 1)
	go func() {
		_ = cmd.Wait()
		outW.Close()
		errW.Close()
		copies.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop(t) })
	name := strings.Join(cmd.Args[1:min(2, len(cmd.Args))], " ")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("velvetrope %s exited before serving:\n%s", name, p.Output())
		default:
		}
		if r, err := http.Get("http://" + p.HTTP + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK && (ready == nil || ready(p)) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("velvetrope %s did not serve within 30 s:\n%s", name, p.Output())
		}
	}
}

// Stdout, Stderr and Output are what the process has written: to each
// stream, and to both in the order written.
func (p *Process) Stdout() string { return p.text(0) }

// Stderr: see Stdout.
func (p *Process) Stderr() string { return p.text(1) }

// Output: see Stdout.
func (p *Process) Output() string { return p.text(2) }

func (p *Process) text(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out[i].String()
}

// Done is closed once the process has exited and its output is kept.
func (p *Process) Done() <-chan struct{} { return p.done }

// Cmd is the running command (its Process to signal).
func (p *Process) Cmd() *exec.Cmd { return p.cmd }

// Stop sends SIGTERM and waits for the exit, at most 30 s (then the
// process is killed and the test fails). Stopping twice is harmless.
func (p *Process) Stop(t testing.TB) {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("velvetrope did not stop on SIGTERM within 30 s")
	}
}
