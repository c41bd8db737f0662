// Package tally counts one counter key's decisions for the analytics:
// what a checker's delta carries between two emissions (Pending) and the
// key's usage so far in its analytics minute (Minute), the row a delta
// carries whole so that the newest delta of a minute is the row.
package tally

import eventsv1 "github.com/velvetrope/velvetrope/events/v1"

// Refusal is how a refused decision counts: as its caller was answered.
type Refusal uint8

const (
	// Denied: the caller was refused.
	Denied Refusal = iota
	// Deferred: the request was deferred (`on_exceed: defer`), to be
	// admitted later.
	Deferred
	// Shadow: a shadow-mode rule's own refusal: admitted after all,
	// recorded as shadow-denied.
	Shadow
	// Release: the drain's "not yet" on a deferred request, which was
	// counted deferred once already: no decision of anyone's.
	Release
)

// Pending is consumption counted but not yet emitted. Counts are uint32
// (a key's decisions between two emissions, at most a minute apart),
// costs uint64: 80 bytes.
type Pending struct {
	AllowedCost, DeniedCost, Counted uint64
	LateCost                         uint64 // charged after the response (Late)
	First, Last                      int64  // First is 0 while nothing is pending
	AllowedCount, DeniedCount        uint32
	ShadowDenied, Deferred           uint32
	// OverSoft and Elastic count admissions (of AllowedCount) above the
	// rule's own limit: into a soft throttle's overage, or borrowed from
	// an elastic rule's pool.
	OverSoft, Elastic uint32
	LateCount         uint32
}

// Used says something is pending.
func (p *Pending) Used() bool { return p.First != 0 }

func (p *Pending) add(now int64) {
	if p.First == 0 {
		p.First = max(now, 1) // (0 marks an empty pending)
	}
	p.Last = max(p.Last, now)
}

// Tally adds one decision of cost hits: admitted, or refused and counted
// as why says. charged: the refused hits were counted all the same
// (Envoy's semantics); their cost then goes to DeniedCost whatever the
// answer, so that a delta's counted cost stays within its allowed and
// denied cost (events.Validate), and a release is then a denial as any
// refused call that counts. Counted is the caller's: it counts the hits
// the counter holds, which not every tallied decision adds.
func (p *Pending) Tally(now, cost int64, allowed bool, why Refusal, charged bool) {
	if why == Release {
		// the drain's decision on a request counted deferred when it was
		// queued: no decision of anyone's (counted again, one deferred
		// request was two), only its hits once admitted — or charged
		// all the same (Envoy's semantics) — which the cost columns carry
		switch {
		case allowed:
			p.add(now)
			p.AllowedCost += uint64(cost)
		case charged:
			p.add(now)
			p.DeniedCost += uint64(cost)
		}
		return
	}
	p.add(now)
	switch {
	case allowed:
		p.AllowedCount++
		p.AllowedCost += uint64(cost)
	case why == Shadow:
		p.ShadowDenied++
		if charged {
			p.DeniedCost += uint64(cost)
		}
	case why == Deferred && !charged:
		p.Deferred++
	default:
		p.DeniedCount++
		p.DeniedCost += uint64(cost)
	}
}

// Report adds a quota report's decisions (Envoy's RLQS): allowed requests
// the client admitted (a hit each) and denied ones it refused, each one
// decision. Counted is the caller's.
func (p *Pending) Report(now, allowed, denied int64) {
	if allowed <= 0 && denied <= 0 {
		return
	}
	p.add(now)
	p.AllowedCount = satAdd32(p.AllowedCount, allowed)
	p.AllowedCost += uint64(max(allowed, 0))
	p.DeniedCount = satAdd32(p.DeniedCount, denied)
	p.DeniedCost += uint64(max(denied, 0))
}

// satAdd32 adds n to a uint32 count, saturating (a report may carry more
// requests than one emission's count holds).
func satAdd32(c uint32, n int64) uint32 {
	if n <= 0 {
		return c
	}
	if n >= int64(^uint32(0)-c) {
		return ^uint32(0)
	}
	return c + uint32(n)
}

// Late adds a cost charged after the response: no decision, only hits
// counted whatever the counter held (a zero cost is nothing). Counted is
// the caller's, as for Tally.
func (p *Pending) Late(now, cost int64) {
	if cost <= 0 {
		return
	}
	p.add(now)
	p.LateCount++
	p.LateCost += uint64(cost)
}

// Fill sets the decision counts of d from p and, through u, the minute
// row d carries.
func (p *Pending) Fill(d *eventsv1.Delta, u *Minute) {
	d.AllowedCount, d.AllowedCost = uint64(p.AllowedCount), p.AllowedCost
	d.DeniedCount, d.DeniedCost = uint64(p.DeniedCount), p.DeniedCost
	d.DeferredCount, d.ShadowDeniedCount = uint64(p.Deferred), uint64(p.ShadowDenied)
	d.CountedCost, d.FirstUnixNanos, d.LastUnixNanos = p.Counted, p.First, p.Last
	d.LateCount, d.LateCost = uint64(p.LateCount), p.LateCost
	d.Minute = u.Add(p)
}

// Minute is a key's usage in its current analytics minute.
type Minute struct {
	stream                    uint64 // unique per key of its checker
	minute                    int64  // unix seconds; 0: none yet
	allowedCost, deniedCost   uint64
	allowedCount, deniedCount uint32 // a key's decisions in one minute
	deferred, shadowDenied    uint32
	overSoft, elastic         uint32
	lateCount                 uint32
	lateCost                  uint64
}

// NewMinute starts the usage of the key whose rows are stream (unique
// per key of a checker: rows of two keys never merge).
func NewMinute(stream uint64) Minute { return Minute{stream: stream} }

// Add folds p into the usage of its minute (never going back to an
// earlier one) and returns the cumulative row a delta carries.
func (u *Minute) Add(p *Pending) *eventsv1.MinuteUsage {
	t := p.First
	if t == 0 {
		t = p.Last
	}
	if m := max(t/1e9/60*60, u.minute); m != u.minute {
		*u = Minute{stream: u.stream, minute: m}
	}
	u.allowedCount = satAdd32(u.allowedCount, int64(p.AllowedCount)) // a quota report may carry billions
	u.allowedCost += p.AllowedCost
	u.deniedCount = satAdd32(u.deniedCount, int64(p.DeniedCount))
	u.deniedCost += p.DeniedCost
	u.deferred += p.Deferred
	u.shadowDenied += p.ShadowDenied
	u.overSoft += p.OverSoft
	u.elastic += p.Elastic
	u.lateCount += p.LateCount
	u.lateCost += p.LateCost
	return &eventsv1.MinuteUsage{MinuteUnix: u.minute, Stream: u.stream, AllowedCount: uint64(u.allowedCount),
		AllowedCost: u.allowedCost, DeniedCount: uint64(u.deniedCount), DeniedCost: u.deniedCost,
		DeferredCount: uint64(u.deferred), ShadowDeniedCount: uint64(u.shadowDenied),
		OverSoftCount: uint64(u.overSoft), ElasticCount: uint64(u.elastic),
		LateCount: uint64(u.lateCount), LateCost: u.lateCost}
}
