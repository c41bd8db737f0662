package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Demand is one descriptor's use in one minute of a domain, every
// instance and stream summed: what a dry run replays.
type Demand struct {
	Minute                                  int64 // unix seconds, a multiple of 60
	Descriptor                              string
	Allowed, Denied, Deferred, ShadowDenied int64
	AllowedCost, DeniedCost                 int64
}

// Requests are the minute's decisions.
func (d Demand) Requests() int64 { return d.Allowed + d.Denied + d.Deferred + d.ShadowDenied }

// Hits are the minute's hits: the costs recorded, at least one a request
// (rows from before costs were recorded have none).
func (d Demand) Hits() int64 { return max(d.AllowedCost+d.DeniedCost, d.Requests()) }

// DemandQuery asks for a domain's usage since Since, per descriptor and
// minute, at most MaxRows of them.
type DemandQuery struct {
	Domain  string
	Since   time.Time
	MaxRows int
}

// ErrTooMuchDemand is a window whose usage has more rows than the query
// allows: a shorter window or a busier store's limit.
var ErrTooMuchDemand = errors.New("sink: the window holds more usage rows than a dry run reads")

// Demander answers dry runs' queries. [ClickHouse] and [Memory] implement it.
type Demander interface {
	// Demand returns the rows ordered by descriptor, then minute; pools'
	// rows are no client's and are left out.
	Demand(ctx context.Context, q DemandQuery) ([]Demand, error)
}

func (q DemandQuery) validate() error {
	if q.Domain == "" {
		return errors.New("sink: demand: domain required")
	}
	if q.MaxRows < 1 {
		return fmt.Errorf("sink: demand: max rows %d: want 1 or more", q.MaxRows)
	}
	return nil
}

// Demand implements Demander.
func (m *Memory) Demand(_ context.Context, q DemandQuery) ([]Demand, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	type k struct {
		minute int64
		desc   string
	}
	sum := map[k]*Demand{}
	m.each(q.Since, func(r *Row) {
		if r.Domain != q.Domain || r.Pool {
			return
		}
		d := sum[k{r.Minute, r.Descriptor}]
		if d == nil {
			d = &Demand{Minute: r.Minute, Descriptor: r.Descriptor}
			sum[k{r.Minute, r.Descriptor}] = d
		}
		d.Allowed += int64(r.Allowed)
		d.Denied += int64(r.Denied)
		d.Deferred += int64(r.Deferred)
		d.ShadowDenied += int64(r.ShadowDenied)
		d.AllowedCost += int64(r.AllowedCost)
		d.DeniedCost += int64(r.DeniedCost)
	})
	if len(sum) > q.MaxRows {
		return nil, fmt.Errorf("%w (more than %d)", ErrTooMuchDemand, q.MaxRows)
	}
	out := make([]Demand, 0, len(sum))
	for _, d := range sum {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Demand) int {
		if c := strings.Compare(a.Descriptor, b.Descriptor); c != 0 {
			return c
		}
		return int(a.Minute - b.Minute)
	})
	return out, nil
}

// Demand implements Demander.
func (c *ClickHouse) Demand(ctx context.Context, q DemandQuery) ([]Demand, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	if err := c.Migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := c.conn.Query(ctx, "SELECT toUInt32(minute) AS m, descriptor, sum(allowed), sum(denied), sum(deferred), sum(shadow_denied), "+
		"sum(allowed_cost), sum(denied_cost) FROM "+c.db+".usage_minute FINAL WHERE domain = ? AND minute >= ? AND pool = 0 "+
		"GROUP BY m, descriptor ORDER BY descriptor, m LIMIT "+fmt.Sprint(q.MaxRows+1), q.Domain, q.Since.UTC())
	if err != nil {
		return nil, fmt.Errorf("sink: demand: %w", err)
	}
	defer rows.Close()
	var out []Demand
	for rows.Next() {
		var d Demand
		var minute uint32
		var a, dn, df, sd, ac, dc uint64
		if err := rows.Scan(&minute, &d.Descriptor, &a, &dn, &df, &sd, &ac, &dc); err != nil {
			return nil, fmt.Errorf("sink: demand: %w", err)
		}
		d.Minute = int64(minute)
		d.Allowed, d.Denied, d.Deferred, d.ShadowDenied, d.AllowedCost, d.DeniedCost = int64(a), int64(dn), int64(df), int64(sd), int64(ac), int64(dc)
		if len(out) == q.MaxRows {
			return nil, fmt.Errorf("%w (more than %d)", ErrTooMuchDemand, q.MaxRows)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
