// Package fairqueue shares one client-side rate limiter fairly between
// flows of requests.
//
// client-go gives every request of a clientset the same token bucket, in
// the order the requests arrive: a controller that has one Job creating
// hundreds of pods and another waiting to create one makes the second wait
// behind all of the first's requests. A Limiter sits in front of that token
// bucket (it is a flowcontrol.RateLimiter, set as rest.Config.RateLimiter)
// and hands each token to the next flow in turn: every flow with a request
// waiting gets one token per round, so a flow with one request waits for at
// most one token per other busy flow, and a busy flow is never starved
// however many others come and go. Tokens are still drawn one at a time from
// the one bucket, by one worker loop, so the configured QPS and burst are
// never exceeded.
//
// A request's flow is named by its context (WithFlow): client-go passes each
// request's context to the limiter. Requests without a flow share the flow
// "".
//
// Flows named in Options.Background (work nobody waits on, such as event
// writes) have a background share: they take turns among themselves, and
// have a token only when no other flow waits, or once BackgroundEvery
// tokens in a row went to the other flows while one of them waited. They
// use the budget the others leave, take at most one token in
// BackgroundEvery+1 from them, and are never starved.
//
// The turn order is a pure data structure (schedule.go); the Limiter only
// adds the worker that draws tokens and the waiting callers (limiter.go).
package fairqueue
