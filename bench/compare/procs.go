package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/velvetrope/velvetrope/bench/loadgen"
)

// proc is one server process of the comparison, its output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// start runs bin with args and env (added to this process's), logging to
// dir/name.log.
func start(dir, name, bin string, args, env []string) (*proc, error) {
	log := filepath.Join(dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	go func() { cmd.Wait(); f.Close() }()
	return &proc{name: name, cmd: cmd, log: log}, nil
}

// stop sends SIGTERM to the process group and kills it after 10 s.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	pgid := -p.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	for range 100 {
		if syscall.Kill(p.cmd.Process.Pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pgid, syscall.SIGKILL)
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// rss is the process's resident memory in bytes (0 when unknown).
func (p *proc) rss() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// freeAddr is a free 127.0.0.1 port.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err) // no loopback port: nothing here can run
	}
	defer l.Close()
	return l.Addr().String()
}

// waitServing waits until a short run of real calls succeeds against
// addr (speaking protocol p), or fails after 60 s with the log's tail.
func waitServing(p *proc, addr string, proto loadgen.Protocol, domain string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := loadgen.Run(ctx, loadgen.Config{Target: addr, Protocol: proto, Domain: domain, Callers: 1, Conns: 1,
			Requests: 20, Duration: time.Minute, Warmup: -1, Timeout: time.Second, KeyPrefix: "ready-"})
		cancel()
		if err == nil && res.Errors == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s did not answer within 60 s (%v); log:\n%s", p.name, addr, err, p.tail())
		}
		if p.cmd.ProcessState != nil {
			return fmt.Errorf("%s exited: %s; log:\n%s", p.name, p.cmd.ProcessState, p.tail())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitHTTP waits for url to answer 200.
func waitHTTP(p *proc, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := http.Get(url)
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready within 60 s; log:\n%s", p.name, url, p.tail())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// metric sums the samples of one metric name (all its label sets) on a
// Prometheus /metrics page; -1 when absent.
func metric(url, name string) float64 {
	r, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer r.Body.Close()
	sum, found := 0.0, false
	s := bufio.NewScanner(r.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// profile starts a CPU profile of each of s's processes that serves pprof
// (--profiles), over the row's measured time after its warm-up, and
// returns a function that waits for them and writes
// <profiles>/<system>-c<conns>-k<keys>-<process>.pprof.
func (s *served) profile(o options, conns, keys int64) func() error {
	if len(s.pprof) == 0 {
		return func() error { return nil }
	}
	errs := make(chan error, len(s.pprof))
	for name, addr := range s.pprof {
		go func() {
			time.Sleep(o.warmup)
			secs := max(1, int(o.duration/time.Second))
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
			if err != nil {
				errs <- fmt.Errorf("profile of %s %s: %w", s.name, name, err)
				return
			}
			defer resp.Body.Close()
			path := filepath.Join(o.profiles, fmt.Sprintf("%s-c%d-k%d-%s.pprof", s.name, conns, keys, name))
			f, err := os.Create(path)
			if err == nil {
				_, err = io.Copy(f, resp.Body)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			errs <- err
		}()
	}
	return func() error {
		var first error
		for range s.pprof {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}
