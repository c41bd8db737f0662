package httpjson

import "time"

// Ticket is the answer of GET /v1/deferred/{ticket}: where a deferred
// request is.
type Ticket struct {
	Ticket      string     `json:"ticket"`
	State       string     `json:"state"` // queued | delivered | expired | failed
	Attempts    int        `json:"attempts"`
	EnqueuedAt  *time.Time `json:"enqueued_at,omitempty"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// Reason is the last failed attempt's error, or why the item was set
	// aside.
	Reason string `json:"reason,omitempty"`
}
