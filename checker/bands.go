package checker

import "time"

// inFlight is the other instances' consumption predicted to be on its way
// through the pipeline: their learned rate × one pipeline lag. It chooses
// a band; it never refuses.
func (c *Checker) inFlight(e *entry) int64 {
	return e.othersRate * int64(c.cfg.PipelineLag) / int64(time.Second)
}

// threshold is the near-limit band's width in hits for e: at least the
// floor, and the hits the whole fleet can take during one refresh interval
// plus one pipeline lag, times the safety factor.
func (c *Checker) threshold(e *entry, ceiling int64) int64 {
	th := max(c.cfg.NearFloor, ceiling*c.cfg.NearFloorPercent/100)
	k := int64(c.cfg.MinRefresh+c.cfg.PipelineLag) * c.cfg.SafetyPercent / 100 // ns of fleet consumption to cover
	// learned rates (and the last full live window): one division by a constant
	learned := max(e.othersRate, e.live*int64(e.instances-1)) + max(e.ownRate, e.live)
	th = max(th, learned*(k/int64(time.Millisecond))/1000)
	// the live window in progress: a burst counts at once, every instance
	// assumed to go as fast
	if e.liveHits > 0 {
		th = max(th, e.liveHits*int64(e.instances)*k/max(e.used-e.liveFrom, int64(time.Millisecond)))
	}
	return th
}

// rate is the fleet's rate on e in hits per second: the learned one, or —
// when this instance goes faster than that — its live rate, with every
// other instance assumed to go as fast.
func (c *Checker) rate(e *entry) int64 {
	live := e.live
	if e.liveHits > 0 && e.liveFrom > 0 { // the window in progress: a burst counts at once
		live = max(live, e.liveHits*int64(time.Second)/max(e.used-e.liveFrom, int64(time.Millisecond)))
	}
	return max(e.othersRate, live*int64(e.instances-1)) + max(e.ownRate, live)
}

// observe feeds this instance's own consumption into its live rate.
func (e *entry) observe(now, cost int64) {
	if now-e.liveFrom >= int64(rateSpan) {
		if e.liveFrom > 0 {
			e.live = e.liveHits * int64(time.Second) / (now - e.liveFrom)
		}
		e.liveFrom, e.liveHits, e.recheck = now, 0, true
	}
	e.liveHits += cost
}

// learn updates e's rates from a store answer (requires the lock).
func (c *Checker) learn(e *entry, now, others, own int64, instances int) {
	e.instances = int32(max(instances, 1))
	if !e.answered {
		e.answered, e.answers, e.lastAnswer, e.lastOthers, e.lastOwn = true, 1, now, others, own
		return
	}
	dt := now - e.lastAnswer
	if dt < int64(rateSpan) {
		return // too short to measure a rate: keep the baseline
	}
	if d := others - e.lastOthers; d >= 0 {
		e.othersRate = (e.othersRate + d*int64(time.Second)/dt) / 2
	}
	if d := own - e.lastOwn; d >= 0 {
		e.ownRate = (e.ownRate + d*int64(time.Second)/dt) / 2
	}
	// Until others have been seen, assume each other instance runs at our
	// pace rather than at zero.
	if e.othersRate == 0 && e.instances > 1 {
		e.othersRate = e.ownRate * int64(e.instances-1)
	}
	e.answers = min(e.answers+1, 2)
	e.lastAnswer, e.lastOthers, e.lastOwn = now, others, own
}
