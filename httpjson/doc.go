// Package httpjson declares the JSON bodies of velvetrope's HTTP API, once:
// what POST /v1/check takes ([CheckRequest]) and answers ([CheckResponse]),
// the state of a deferred request (GET /v1/deferred/{ticket}, [Ticket]),
// the analytics answers (GET /v1/analytics/..., [TopDenied], [Usage],
// [Rules], [Timeline], [Pools]) and the error body these endpoints refuse
// with ([ErrorResponse]). The server encodes and decodes these types and the Go
// client (package client) the same ones, so the two cannot drift apart;
// the deferred queue keeps a request's [Payload] as the API took it, and
// the analytics store answers its queries in the analytics rows.
//
// The field names, which fields are omitted when empty, and how each value
// is written are the API's contract (docs/http-api.md, docs/analytics.md):
// a change here is a change of the API. Durations are whole milliseconds,
// rounded up (the _ms fields); counts and limits are JSON integers.
//
// It is a leaf: it imports only the standard library, so that a client
// importing it takes on none of the server's dependencies.
package httpjson
