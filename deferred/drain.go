package deferred

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velvetrope/velvetrope/config"
	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/events"
	"github.com/velvetrope/velvetrope/internal/logx"
	"github.com/velvetrope/velvetrope/limiter"
	"github.com/velvetrope/velvetrope/ratelimit"
)

// DrainConfig configures a Drain. Zero values take the defaults named.
type DrainConfig struct {
	Consumer    events.Consumer   // the deferred topic, under the drains' group
	DeadLetters events.Publisher  // the dead-letter topic
	Checker     ratelimit.Checker // decides every release, on the counters live traffic uses
	Rules       func() *config.RuleSet
	// Tickets keeps ticket states and the count of queued items, which
	// the drain takes each finished item out of.
	Tickets counters.Deferrals
	// Client delivers; nil builds one with DeliveryTimeout that never
	// follows redirects (a 3xx is the target's answer, not an instruction).
	Client          *http.Client
	Workers         int           // deliveries at once; 16
	MaxInFlight     int           // items held in memory; 10,000 (fetching waits past it)
	DeliveryTimeout time.Duration // one delivery attempt; 10 s
	BackoffMin      time.Duration // first retry after a failed delivery; 200 ms
	BackoffMax      time.Duration // longest wait between attempts; 30 s
	Retention       time.Duration // ticket states outlive deadlines by this; DefaultRetention
	CommitInterval  time.Duration // how often finished offsets are committed; 200 ms
	Logger          *slog.Logger
}

// Dead-letter reasons.
const (
	ReasonExpired   = "expired"   // past its deadline (the rule's max_age)
	ReasonAttempts  = "attempts"  // max_attempts deliveries failed
	ReasonRejected  = "rejected"  // the target refused it for what it is (a 4xx other than 408 and 429, a 3xx)
	ReasonMalformed = "malformed" // the record is not an item
	ReasonRule      = "rule"      // no rule defers it any more, or its hits exceed what the rule ever admits
)

var reasons = []string{ReasonExpired, ReasonAttempts, ReasonRejected, ReasonMalformed, ReasonRule}

// Drain releases deferred items in order per key when the key has budget
// again and delivers them to their rule's target. Delivery is at least
// once: an offset is committed only when every item up to it was
// delivered or dead-lettered, so a drain that dies re-reads what it had
// not finished — a repeat always carries the ticket's Idempotency-Key.
type Drain struct {
	cfg    DrainConfig
	client *http.Client
	log    *logx.Limited

	slots   chan struct{} // MaxInFlight
	workers chan struct{} // Workers

	mu    sync.Mutex
	keys  map[string]*keyQueue
	jobs  map[string]*job // by ticket
	parts map[int]*tracker
	wg    sync.WaitGroup

	// Counters for metrics.
	Fetched     atomic.Uint64 // records read
	Releases    atomic.Uint64 // items the counters admitted again
	Waits       atomic.Uint64 // release decisions that said "not yet"
	Deliveries  atomic.Uint64 // items the target accepted (2xx)
	Retries     atomic.Uint64 // delivery attempts that failed and were tried again
	Duplicates  atomic.Uint64 // records of tickets already finished (a re-read after a crash or rebalance)
	StoreErrors atomic.Uint64 // release decisions or ticket writes the store failed
	CommitErrs  atomic.Uint64 // offset commits that failed (retried at the next interval)
	dead        [5]atomic.Uint64
	latency     atomic.Int64 // deliveries' moving average, ns
}

type keyQueue struct {
	items []*job
}

type job struct {
	it   *Item
	msgs []events.Message
	// raw is the record of an item with a payload: the item is held
	// without it (the payload, up to 512 KiB, is not kept twice while the
	// item waits for budget) and decoded again from raw to be delivered.
	raw []byte
	// attempts is the deliveries tried; released says the counters were
	// charged for it (retries do not charge again).
	attempts int
	released bool
}

// item is the job's item with its payload.
func (j *job) item() (*Item, error) {
	if j.raw == nil {
		return j.it, nil
	}
	return Decode(j.raw)
}

// tracker is one partition's unfinished offsets: the committable offset
// is the one before the lowest unfinished, or the highest seen when all
// are done.
type tracker struct {
	open      map[int64]int
	maxSeen   int64
	committed int64
}

// NewDrain checks cfg and returns a drain; Run starts it.
func NewDrain(cfg DrainConfig) (*Drain, error) {
	if cfg.Consumer == nil || cfg.DeadLetters == nil || cfg.Checker == nil || cfg.Rules == nil || cfg.Tickets == nil {
		return nil, errors.New("deferred: a drain needs a consumer, a dead-letter publisher, a checker, rules and tickets")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.DeliveryTimeout, 10*time.Second)
	def(&cfg.BackoffMin, 200*time.Millisecond)
	def(&cfg.BackoffMax, 30*time.Second)
	def(&cfg.Retention, DefaultRetention)
	def(&cfg.CommitInterval, 200*time.Millisecond)
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 10000
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		return nil, fmt.Errorf("deferred: backoff_max %v is below backoff_min %v", cfg.BackoffMax, cfg.BackoffMin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.DeliveryTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Drain{cfg: cfg, client: client, log: logx.New(cfg.Logger, 10*time.Second),
		slots: make(chan struct{}, cfg.MaxInFlight), workers: make(chan struct{}, cfg.Workers),
		keys: map[string]*keyQueue{}, jobs: map[string]*job{}, parts: map[int]*tracker{}}, nil
}

// Run drains until ctx ends, then waits for the items in hand to stop
// (those not finished are left uncommitted, for the next drain) and
// commits what was finished. It returns ctx's error, or the consumer's
// if it fails for good.
func (d *Drain) Run(ctx context.Context) error {
	commitDone := make(chan struct{})
	cctx, stopCommits := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(commitDone)
		t := time.NewTicker(d.cfg.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				d.commit(cctx)
			}
		}
	}()
	err := d.fetchLoop(ctx)
	d.wg.Wait()
	stopCommits()
	<-commitDone
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	d.commit(fctx)
	cancel()
	return err
}

func (d *Drain) fetchLoop(ctx context.Context) error {
	for {
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		m, err := d.cfg.Consumer.Fetch(ctx)
		if err != nil {
			<-d.slots
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, events.ErrClosed) || errors.Is(err, io.EOF) {
				return err
			}
			d.log.Warn("deferred: fetch failed; trying again", "error", err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			continue
		}
		d.Fetched.Add(1)
		d.open(m)
		it, err := Decode(m.Value)
		if err != nil {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				j := &job{msgs: []events.Message{m}}
				if d.deadLetter(ctx, j, ReasonMalformed, err.Error()) {
					d.finish(j)
				}
			}()
			continue
		}
		// the item is decoded: its job keeps the record's place (partition,
		// offset) and, for a payload, the record's bytes, not both forms
		var raw []byte
		if it.Payload != nil {
			raw, it.Payload = m.Value, nil
		}
		m.Key, m.Value = nil, nil
		d.mu.Lock()
		if j := d.jobs[it.Ticket]; j != nil {
			// the same ticket again (a rebalance re-read it): it finishes
			// with the one in hand
			j.msgs = append(j.msgs, m)
			d.mu.Unlock()
			<-d.slots
			continue
		}
		j := &job{it: it, raw: raw, msgs: []events.Message{m}}
		d.jobs[it.Ticket] = j
		kq := d.keys[it.Key]
		start := kq == nil
		if start {
			kq = &keyQueue{}
			d.keys[it.Key] = kq
		}
		kq.items = append(kq.items, j)
		d.mu.Unlock()
		if start {
			d.wg.Add(1)
			go d.runKey(ctx, it.Key, kq)
		}
	}
}

// open records an offset as unfinished.
func (d *Drain) open(m events.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.parts[m.Partition]
	if t == nil {
		t = &tracker{open: map[int64]int{}, maxSeen: -1, committed: -1}
		d.parts[m.Partition] = t
	}
	t.open[m.Offset]++
	t.maxSeen = max(t.maxSeen, m.Offset)
}

// finish marks a job's records finished and frees its slot, and takes
// its item out of the count of queued items (defer.max_queued,
// deferred.max_bytes): delivered, dead-lettered or a duplicate, it holds
// no room any more. Should the store not answer, the count lets go of it
// at its deadline.
func (d *Drain) finish(j *job) {
	if j.it != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.cfg.Tickets.FinishItem(ctx, j.it.Key, j.it.Ticket); err != nil {
			d.StoreErrors.Add(1)
			d.log.Warn("deferred: a finished item stays counted as queued until its deadline", "ticket", j.it.Ticket, "error", err)
		}
		cancel()
	}
	d.mu.Lock()
	for _, m := range j.msgs {
		t := d.parts[m.Partition]
		if t.open[m.Offset]--; t.open[m.Offset] <= 0 {
			delete(t.open, m.Offset)
		}
	}
	if j.it != nil && d.jobs[j.it.Ticket] == j {
		delete(d.jobs, j.it.Ticket)
	}
	d.mu.Unlock()
	<-d.slots
}

// commit commits every partition's finished prefix that advanced.
func (d *Drain) commit(ctx context.Context) {
	var msgs []events.Message
	d.mu.Lock()
	for p, t := range d.parts {
		mark := t.maxSeen
		for o := range t.open {
			mark = min(mark, o-1)
		}
		if mark > t.committed {
			msgs = append(msgs, events.Message{Partition: p, Offset: mark})
		}
	}
	d.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	if err := d.cfg.Consumer.Commit(ctx, msgs...); err != nil {
		d.CommitErrs.Add(1)
		d.log.Warn("deferred: commit failed; trying again", "error", err)
		return
	}
	d.mu.Lock()
	for _, m := range msgs {
		if t := d.parts[m.Partition]; t != nil {
			t.committed = max(t.committed, m.Offset)
		}
	}
	d.mu.Unlock()
}

// runKey works through one key's items in order, and ends when the key
// has none left.
func (d *Drain) runKey(ctx context.Context, key string, kq *keyQueue) {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(kq.items) == 0 {
			delete(d.keys, key)
			d.mu.Unlock()
			return
		}
		j := kq.items[0]
		d.mu.Unlock()
		if ctx.Err() != nil || !d.process(ctx, j) {
			// ctx ended: what is left stays unfinished, uncommitted, for
			// the next drain
			d.mu.Lock()
			for _, j := range kq.items {
				delete(d.jobs, j.it.Ticket)
			}
			delete(d.keys, key)
			d.mu.Unlock()
			return
		}
		d.mu.Lock()
		kq.items = kq.items[1:]
		d.mu.Unlock()
		d.finish(j)
	}
}

// process releases and delivers one item; false when ctx ended first
// (the item is then not finished).
func (d *Drain) process(ctx context.Context, j *job) bool {
	it := j.it
	ttl := time.Until(it.Deadline) + d.cfg.Retention
	if t, found, err := d.cfg.Tickets.GetTicket(ctx, it.Ticket); err == nil && found && counters.TicketTerminal(t.State) {
		d.Duplicates.Add(1)
		return true
	} else if found {
		j.attempts = max(j.attempts, t.Attempts)
	}
	r := d.ruleOf(it)
	if r == nil {
		return d.deadLetter(ctx, j, ReasonRule, fmt.Sprintf("no rule %s defers domain %s's request any more", it.Rule, it.Domain))
	}
	for !j.released {
		if !time.Now().Before(it.Deadline) {
			return d.deadLetter(ctx, j, ReasonExpired, fmt.Sprintf("not released before its deadline %s", it.Deadline.Format(time.RFC3339Nano)))
		}
		// A fixed window's release is delivered in the same window: too
		// close to its end, the delivery would arrive in the next one,
		// beside that window's own releases. Wait for it instead.
		if left := d.windowLeft(r, time.Now()); left > 0 {
			if !sleep(ctx, left+rand.N(2*time.Millisecond)) {
				return false
			}
			continue
		}
		req := it.Request(d.cfg.Rules())
		var dec ratelimit.Decision
		err := d.cfg.Checker.Check(ctx, &req, &dec)
		var fe *ratelimit.FieldError
		switch {
		case ctx.Err() != nil:
			return false
		case errors.As(err, &fe):
			return d.deadLetter(ctx, j, ReasonRule, "the rules refuse the request now: "+err.Error())
		case err != nil:
			d.StoreErrors.Add(1)
			d.log.Warn("deferred: release decision failed; trying again", "ticket", it.Ticket, "error", err)
			if !sleep(ctx, min(d.cfg.BackoffMin, time.Until(it.Deadline))) {
				return false
			}
		case dec.Code == ratelimit.OK:
			j.released = true
			d.Releases.Add(1)
		default:
			wait, never := dec.RetryAfter()
			if never {
				return d.deadLetter(ctx, j, ReasonRule, "its hits exceed what the rule ever admits")
			}
			d.Waits.Add(1)
			// a little jitter, so keys whose windows open together do not
			// all ask in the same millisecond
			wait = max(wait, time.Millisecond) + rand.N(2*time.Millisecond)
			if !sleep(ctx, min(wait, time.Until(it.Deadline)+time.Millisecond)) {
				return false
			}
		}
	}
	// The payload, decoded again from the record, and so checked again
	// (its path above all) right before it is delivered: the fetch's
	// decoding refused what escapes the target already.
	full, err := j.item()
	if err != nil {
		return d.deadLetter(ctx, j, ReasonMalformed, err.Error())
	}
	for {
		if !time.Now().Before(it.Deadline) {
			return d.deadLetter(ctx, j, ReasonExpired, fmt.Sprintf("not delivered before its deadline %s after %d attempts",
				it.Deadline.Format(time.RFC3339Nano), j.attempts))
		}
		select {
		case d.workers <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		j.attempts++
		began := time.Now()
		status, err := d.deliver(ctx, r, full)
		d.learnLatency(time.Since(began))
		<-d.workers
		if ctx.Err() != nil {
			return false
		}
		switch {
		case err == nil && status/100 == 2:
			d.Deliveries.Add(1)
			d.putTicket(ctx, it, counters.Ticket{State: counters.TicketDelivered, Attempts: j.attempts,
				DeliveredAt: time.Now().UnixNano()}, ttl)
			return true
		case err == nil && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout && status < 500:
			return d.deadLetter(ctx, j, ReasonRejected, "target answered "+strconv.Itoa(status))
		case errors.Is(err, errOutsideTarget):
			return d.deadLetter(ctx, j, ReasonMalformed, err.Error())
		}
		// why is for the ticket (no address: see failedDelivery), the
		// error itself for operators
		why, internal := "target answered "+strconv.Itoa(status), ""
		if err != nil {
			why, internal = failedDelivery(err), err.Error()
			d.log.Warn("deferred: delivery failed", "ticket", it.Ticket, "rule", r.ID, "attempt", j.attempts, "error", err)
		}
		if j.attempts >= r.Defer.MaxAttempts {
			return d.deadLetterDetailed(ctx, j, ReasonAttempts, fmt.Sprintf("%d attempts; the last: %s", j.attempts, why), internal)
		}
		d.Retries.Add(1)
		d.putTicket(ctx, it, counters.Ticket{State: counters.TicketQueued, Attempts: j.attempts, Reason: why}, ttl)
		if !sleep(ctx, d.backoff(j.attempts)) {
			return false
		}
	}
}

// windowLeft is how long until r's fixed window ends, when that is too
// short for a delivery (twice the deliveries' usual time, and 5 ms); 0
// otherwise, and for other algorithms.
func (d *Drain) windowLeft(r *config.Rule, now time.Time) time.Duration {
	if r.Algorithm != config.AlgFixedWindow || r.Window <= 0 {
		return 0
	}
	n, w := now.UnixNano(), int64(r.Window)
	left := time.Duration(limiter.WindowStart(n, w) + w - n)
	guard := 2*time.Duration(d.latency.Load()) + 5*time.Millisecond
	if left < guard && guard < r.Window/2 {
		return left
	}
	return 0
}

// learnLatency folds one delivery's time into the moving average (1/8).
func (d *Drain) learnLatency(took time.Duration) {
	for {
		old := d.latency.Load()
		if d.latency.CompareAndSwap(old, old+(int64(took)-old)/8) {
			return
		}
	}
}

// backoff is the wait after the n-th failed attempt: exponential from
// BackoffMin to BackoffMax, with half of it random.
func (d *Drain) backoff(n int) time.Duration {
	b := d.cfg.BackoffMin << min(n-1, 30)
	if b <= 0 || b > d.cfg.BackoffMax {
		b = d.cfg.BackoffMax
	}
	return b/2 + rand.N(b/2+1)
}

// ruleOf finds the rule that deferred it in the rules now in force.
func (d *Drain) ruleOf(it *Item) *config.Rule {
	rs := d.cfg.Rules()
	if r := rs.RuleByID(it.Rule); r != nil && r.Domain == it.Domain && r.OnExceed == config.ExceedDefer && r.Defer.Target != "" {
		return r
	}
	return nil
}

// noPayload is what the target receives for an item without a payload.
type noPayload struct {
	Ticket      string       `json:"ticket"`
	Domain      string       `json:"domain"`
	Rule        string       `json:"rule"`
	Descriptors []Descriptor `json:"descriptors"`
	EnqueuedAt  time.Time    `json:"enqueued_at"`
}

// deliver sends it to r's target once and returns the status.
func (d *Drain) deliver(ctx context.Context, r *config.Rule, it *Item) (int, error) {
	method, path := http.MethodPost, "/"
	var body []byte
	p := it.Payload
	if p != nil {
		if p.Method != "" {
			method = p.Method
		}
		if p.Path != "" {
			path = p.Path
		}
		body = []byte(p.Body)
		if p.BodyBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(p.BodyBase64)
			if err != nil {
				return 0, err // Decode checked it; never here
			}
			body = b
		}
	} else {
		body, _ = json.Marshal(noPayload{Ticket: it.Ticket, Domain: it.Domain, Rule: it.Rule,
			Descriptors: it.Descriptors, EnqueuedAt: it.EnqueuedAt})
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.DeliveryTimeout)
	defer cancel()
	u, err := joinTarget(r.Defer.Target, path)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(rctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if p != nil {
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", it.Ticket)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("delivery: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// errOutsideTarget is a delivery URL that would leave the rule's target:
// another scheme or host, or a path outside the target's base path.
var errOutsideTarget = errors.New("the payload's path leaves the target's base path")

// joinTarget is the URL a delivery goes to: path under the target's base.
// The join is checked after the fact as well (the path was checked when
// the item was made and read): scheme, host and base path are the
// target's, whatever the path holds.
func joinTarget(target, path string) (string, error) {
	base, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("%w: the target does not parse", errOutsideTarget)
	}
	joined := strings.TrimRight(target, "/") + path
	u, err := url.Parse(joined)
	prefix := strings.TrimRight(base.EscapedPath(), "/") + "/"
	if err != nil || u.Scheme != base.Scheme || u.Host != base.Host || u.User != nil ||
		!strings.HasPrefix(u.EscapedPath()+"/", prefix) {
		return "", errOutsideTarget
	}
	return joined, nil
}

// deadLetter appends the item to the dead letters, trying until the topic
// takes it (or ctx ends: false, nothing finished), and records the
// ticket's end; detail is the ticket's reason as well, so it names no
// internal address.
func (d *Drain) deadLetter(ctx context.Context, j *job, reason, detail string) bool {
	return d.deadLetterDetailed(ctx, j, reason, detail, "")
}

// deadLetterDetailed is deadLetter with the error behind detail for the
// dead-letter record and the log (operators'), never for the ticket.
func (d *Drain) deadLetterDetailed(ctx context.Context, j *job, reason, detail, internal string) bool {
	dl := DeadLetter{Reason: reason, Detail: detail, DeadAt: time.Now().UTC(), Attempts: j.attempts, Item: j.it}
	if full, err := j.item(); err == nil && j.it != nil {
		dl.Item = full // with its payload, for whoever replays it
	}
	if internal != "" {
		dl.Detail += " (" + internal + ")"
	}
	key := []byte(nil)
	if j.it != nil {
		key = []byte(j.it.Key)
	} else {
		dl.Raw = j.msgs[0].Value
		key = j.msgs[0].Key
	}
	v, err := json.Marshal(dl)
	if err != nil {
		v, _ = json.Marshal(DeadLetter{Reason: reason, Detail: detail + " (item not encodable: " + err.Error() + ")", DeadAt: dl.DeadAt})
	}
	for wait := d.cfg.BackoffMin; ; wait = min(2*wait, d.cfg.BackoffMax) {
		err := d.cfg.DeadLetters.Publish(ctx, []events.Message{{Key: key, Value: v}})
		if err == nil {
			break
		}
		d.log.Warn("deferred: dead-letter topic refused a record; trying again", "reason", reason, "error", err)
		if !sleep(ctx, wait) {
			return false
		}
	}
	d.dead[slices.Index(reasons, reason)].Add(1)
	d.log.Warn("deferred: item dead-lettered", "reason", reason, "detail", dl.Detail)
	if j.it != nil {
		state := counters.TicketFailed
		if reason == ReasonExpired {
			state = counters.TicketExpired
		}
		d.putTicket(ctx, j.it, counters.Ticket{State: state, Attempts: j.attempts, Reason: reason + ": " + detail},
			time.Until(j.it.Deadline)+d.cfg.Retention)
	}
	return true
}

func (d *Drain) putTicket(ctx context.Context, it *Item, t counters.Ticket, ttl time.Duration) {
	if err := d.cfg.Tickets.PutTicket(ctx, it.Ticket, t, max(ttl, time.Minute)); err != nil {
		d.StoreErrors.Add(1)
		d.log.Warn("deferred: ticket state not stored", "ticket", it.Ticket, "state", t.State, "error", err)
	}
}

// DeadLetters returns the items dead-lettered, by reason.
func (d *Drain) DeadLetters() map[string]uint64 {
	out := make(map[string]uint64, len(reasons))
	for i, r := range reasons {
		out[r] = d.dead[i].Load()
	}
	return out
}

// Depth returns how many items the drain holds (waiting for budget or
// being delivered), and the age of those at the 50th and 99th
// percentiles of their enqueue times.
func (d *Drain) Depth() (n int, p50, p99 time.Duration) {
	d.mu.Lock()
	ages := make([]time.Duration, 0, len(d.jobs))
	now := time.Now()
	for _, j := range d.jobs {
		ages = append(ages, now.Sub(j.it.EnqueuedAt))
	}
	d.mu.Unlock()
	if len(ages) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ages)
	return len(ages), ages[(len(ages)-1)/2], ages[(len(ages)-1)*99/100]
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
