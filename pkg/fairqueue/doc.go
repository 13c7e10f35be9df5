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
// however many others come and go. Tokens are still drawn from the one
// bucket, one per request, so the configured QPS and burst are never
// exceeded.
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
// With Options.Window, tokens are handed out in batches while callers wait:
// the worker gives every token already in the bucket to the next callers in
// turn, then waits out the window before drawing again, so the tokens that
// accrue meanwhile go out together at its end. The QPS and burst are the
// same; what changes is that a process whose requests are throttled wakes
// once per window instead of once per token (10 ms apart at QPS 100), and
// its requests, their answers and their watch events come in bunches that
// one wake-up serves: that took about a third off the Job controller's CPU
// (docs/benchmarks.md). A throttled request waits at most one window
// longer.
//
// The turn order is a pure data structure (schedule.go); the Limiter only
// adds the worker that draws tokens and the waiting callers (limiter.go).
package fairqueue
