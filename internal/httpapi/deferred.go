package httpapi

import (
	"net/http"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/deferred"
)

// TicketJSON is the answer of GET /v1/deferred/{ticket}.
type TicketJSON struct {
	Ticket      string     `json:"ticket"`
	State       string     `json:"state"` // queued | delivered | expired | failed
	Attempts    int        `json:"attempts"`
	EnqueuedAt  *time.Time `json:"enqueued_at,omitempty"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// Reason is the last failed attempt's error, or why the item was set
	// aside.
	Reason string `json:"reason,omitempty"`
}

// TicketHandler serves GET /v1/deferred/{ticket} from the ticket states in
// the counter store: 404 for a ticket it does not hold (never issued, or
// past its retention), 503 when the store does not answer.
func TicketHandler(tickets counters.Tickets) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("ticket")
		if !deferred.ValidTicket(id) {
			writeError(w, http.StatusBadRequest, "ticket", "ticket: "+quoteShort(id)+" is not a ticket (22 URL-safe base64 characters)")
			return
		}
		t, found, err := tickets.GetTicket(r.Context(), id)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, "", "ticket states unavailable: "+err.Error())
			return
		case !found:
			writeError(w, http.StatusNotFound, "ticket", "ticket: no deferred request "+id+" (never issued, or older than deferred.state_retention)")
			return
		}
		out := TicketJSON{Ticket: id, State: t.State, Attempts: t.Attempts, Reason: t.Reason}
		if t.EnqueuedAt != 0 {
			at := time.Unix(0, t.EnqueuedAt).UTC()
			out.EnqueuedAt = &at
		}
		if t.DeliveredAt != 0 {
			at := time.Unix(0, t.DeliveredAt).UTC()
			out.DeliveredAt = &at
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return `"` + s + `"`
}
