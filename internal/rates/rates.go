// Package rates learns a counter key's rates, which size its near band
// and predict the hits in flight to the shared counter: the fleet's and
// this instance's, learned from successive store answers, and this
// instance's live rate, measured as it decides (docs/design.md, "How the
// band adapts").
package rates

import "time"

// Span is the shortest interval a rate is measured over.
const Span = 10 * time.Millisecond

// Rates are one key's. The key's lock guards them.
type Rates struct {
	// Others and Own are the other instances' and this instance's hits
	// per second, learned from store answers.
	Others, Own int64
	// live is this instance's own rate measured as it decides (hits per
	// second over the last Span), so a key that speeds up (as it does when
	// it leaves the near band, where every decision waited on the store)
	// widens its band at once, before any store answer.
	live, liveFrom, liveHits    int64
	lastAt, lastOthers, lastOwn int64 // the last answer: when, and its counts
	// Instances is the live instances the last answer counted (at least
	// 1 once answered).
	Instances int32
	answers   int8 // answers that taught a rate (0, 1, 2+)
	// Recheck says a live window ended since it was last cleared: the
	// key's next read may be due sooner (Observe sets it, the caller
	// clears it).
	Recheck bool
}

// Answered says a store answer has been learned from.
func (r *Rates) Answered() bool { return r.answers > 0 }

// Taught says two answers have taught the rates: before that the
// others' in-flight hits cannot be bounded.
func (r *Rates) Taught() bool { return r.answers >= 2 }

// LastAnswer is when the last answer was learned from (unix ns).
func (r *Rates) LastAnswer() int64 { return r.lastAt }

// Observe feeds this instance's own consumption of cost hits at now into
// its live rate.
func (r *Rates) Observe(now, cost int64) {
	if now-r.liveFrom >= int64(Span) {
		if r.liveFrom > 0 {
			r.live = r.liveHits * int64(time.Second) / (now - r.liveFrom)
		}
		r.liveFrom, r.liveHits, r.Recheck = now, 0, true
	}
	r.liveHits += cost
}

// Learn takes in a store answer at now: the others' and this instance's
// consumption it counted, and the live instances.
func (r *Rates) Learn(now, others, own int64, instances int) {
	r.Instances = int32(max(instances, 1))
	if r.answers == 0 {
		r.answers, r.lastAt, r.lastOthers, r.lastOwn = 1, now, others, own
		return
	}
	dt := now - r.lastAt
	if dt < int64(Span) {
		return // too short to measure a rate: keep the baseline
	}
	if d := others - r.lastOthers; d >= 0 {
		r.Others = (r.Others + d*int64(time.Second)/dt) / 2
	}
	if d := own - r.lastOwn; d >= 0 {
		r.Own = (r.Own + d*int64(time.Second)/dt) / 2
	}
	// Until others have been seen, assume each other instance runs at our
	// pace rather than at zero.
	if r.Others == 0 && r.Instances > 1 {
		r.Others = r.Own * int64(r.Instances-1)
	}
	r.answers = min(r.answers+1, 2)
	r.lastAt, r.lastOthers, r.lastOwn = now, others, own
}

// InFlight is the other instances' consumption predicted to be on its way
// through the pipeline: their learned rate × one pipeline lag. It chooses
// a band; it never refuses.
func (r *Rates) InFlight(lag time.Duration) int64 {
	return r.Others * int64(lag) / int64(time.Second)
}

// Fleet is the fleet's rate in hits per second at used (the key's last
// decision): the learned one, or — when this instance goes faster than
// that — its live rate, with every other instance assumed to go as fast.
func (r *Rates) Fleet(used int64) int64 {
	live := r.live
	if r.liveHits > 0 && r.liveFrom > 0 { // the window in progress: a burst counts at once
		live = max(live, r.liveHits*int64(time.Second)/max(used-r.liveFrom, int64(time.Millisecond)))
	}
	return max(r.Others, live*int64(r.Instances-1)) + max(r.Own, live)
}

// Band sizes the near band: at least Floor hits and FloorPercent of the
// ceiling, and the hits the fleet can take in Cover (a refresh interval
// plus a pipeline lag, times the safety factor).
type Band struct {
	Floor, FloorPercent int64
	Cover               time.Duration
}

// Threshold is the near band's width in hits for a key of ceiling whose
// last decision was at used.
func (r *Rates) Threshold(b Band, used, ceiling int64) int64 {
	th := max(b.Floor, ceiling*b.FloorPercent/100)
	k := int64(b.Cover) // ns of fleet consumption to cover
	// learned rates (and the last full live window): one division by a constant
	learned := max(r.Others, r.live*int64(r.Instances-1)) + max(r.Own, r.live)
	th = max(th, learned*(k/int64(time.Millisecond))/1000)
	// the live window in progress: a burst counts at once, every instance
	// assumed to go as fast
	if r.liveHits > 0 {
		th = max(th, r.liveHits*int64(r.Instances)*k/max(used-r.liveFrom, int64(time.Millisecond)))
	}
	return th
}
