package httpapi

import (
	"net/http"
	"time"

	"github.com/velvetrope/velvetrope/counters"
	"github.com/velvetrope/velvetrope/deferred"
	"github.com/velvetrope/velvetrope/httpjson"
)

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
		out := httpjson.Ticket{Ticket: id, State: t.State, Attempts: t.Attempts, Reason: t.Reason}
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
