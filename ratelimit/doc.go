// Package ratelimit holds what every layer of velvetrope shares: the
// [Request] an engine decides and the [Decision] it answers (one [Status]
// per descriptor, each with its [Code]), the errors a malformed request
// gets (a [FieldError] naming the field), the checks of a request against
// its bounds ([Request.ValidateBounds], [CheckEntries]; the bounds and
// their defaults are config's, [config.LimitsConfig]), the request-id
// memory both engines answer retries from ([RequestIDs]), the rate limit
// response headers every surface writes ([SetHeaders]) and the small
// interfaces the API layers take ([Checker], [Observer]).
//
// It is a leaf: it imports nothing of velvetrope's but package config (the
// rules a status names) and the request-id memory of internal/idem (which
// package limiter shares, and limiter may not import config). The engines (package checker, the async one;
// package local, the exact one it is property-tested against), the
// surfaces (package rls, package middleware, the HTTP API) and the
// deferred queue depend on it, not on each other, so the reference engine
// never imports what it checks and a surface never imports an engine.
package ratelimit
