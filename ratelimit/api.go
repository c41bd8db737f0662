package ratelimit

import "context"

// Checker decides a request into d, reusing d.Statuses' capacity: the
// engine an API layer (the HTTP API, package rls, package middleware) and
// the deferred drain take. The async checker (package checker), the exact
// engine (package local) and middleware.Remote implement it. A refusal is
// a Decision, not an error; an error is a malformed request (a
// *[FieldError]) or a fault.
type Checker interface {
	Check(ctx context.Context, req *Request, d *Decision) error
}

// Observer is told of every decision an API answers (the decision counts
// per rule of internal/decisions); an API given a nil Observer observes
// nothing.
type Observer interface {
	Observe(d *Decision)
}
