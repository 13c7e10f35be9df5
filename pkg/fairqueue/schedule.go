package fairqueue

import "slices"

// roundRobin holds the requests waiting in every flow and decides which one
// the next token goes to. Flows take turns, one request per turn, in the
// order in which they last started waiting; within a flow, requests keep
// their order. So a flow that starts waiting is served after at most one
// request of each flow already waiting, and a flow that keeps waiting is
// served once per round whatever other flows do.
//
// Background flows take turns among themselves and have a background
// share: the next token goes to one of them only if no other flow waits,
// or if every tokens in a row went to other flows while one of them waited.
// So they have the budget the other flows leave, at most one token in
// every+1 while others wait, and a background request still waits for at
// most every tokens of the other flows per background request ahead of it.
// It is not safe for concurrent use.
type roundRobin[T comparable] struct {
	// queues are the waiting requests of each flow, oldest first; a flow
	// with none has no entry.
	queues map[string][]T
	// turns are the flows other than background ones with waiting requests,
	// the next to be served first.
	turns []string
	// backgroundTurns are the background flows with waiting requests, the
	// next to be served first.
	backgroundTurns []string
	// background holds the names of the background flows.
	background map[string]bool
	// every is how many tokens in a row may go to other flows while a
	// background flow waits; at least 1.
	every int
	// passed counts the tokens given to other flows while a background flow
	// waited, since one was last served or none waited.
	passed int
	// n is the number of waiting requests.
	n int
}

// newRoundRobin returns an empty roundRobin in which the flows named in
// background have a background share of one token per every tokens of the
// other flows (every < 1 counts as 1).
func newRoundRobin[T comparable](background []string, every int) *roundRobin[T] {
	r := &roundRobin[T]{queues: map[string][]T{}, background: map[string]bool{}, every: max(every, 1)}
	for _, flow := range background {
		r.background[flow] = true
	}
	return r
}

// turnsOf returns the turn list flow belongs to.
func (r *roundRobin[T]) turnsOf(flow string) *[]string {
	if r.background[flow] {
		return &r.backgroundTurns
	}
	return &r.turns
}

// push adds item at the end of flow's requests; a flow that had none takes
// the last turn of its kind.
func (r *roundRobin[T]) push(flow string, item T) {
	q, waiting := r.queues[flow]
	if !waiting {
		turns := r.turnsOf(flow)
		*turns = append(*turns, flow)
	}
	r.queues[flow] = append(q, item)
	r.n++
}

// pop takes the oldest request of the flow whose turn it is, and moves that
// flow to the last turn of its kind if it has more. A background flow's
// turn comes when no other flow waits or every tokens passed to others
// while it waited. ok is false if nothing waits.
func (r *roundRobin[T]) pop() (item T, flow string, ok bool) {
	var turns *[]string
	switch {
	case len(r.backgroundTurns) > 0 && (len(r.turns) == 0 || r.passed >= r.every):
		turns = &r.backgroundTurns
		r.passed = 0
	case len(r.turns) > 0:
		turns = &r.turns
		if len(r.backgroundTurns) > 0 {
			r.passed++
		}
	default:
		return item, "", false
	}
	flow = (*turns)[0]
	*turns = (*turns)[1:]
	q := r.queues[flow]
	item = q[0]
	if len(q) == 1 {
		delete(r.queues, flow)
	} else {
		r.queues[flow] = q[1:]
		*turns = append(*turns, flow)
	}
	r.n--
	return item, flow, true
}

// remove takes item out of flow's requests (a caller that stopped waiting)
// and reports whether it was waiting. A flow left with none loses its turn;
// when no background flow is left waiting, the count of tokens passed to
// the others starts again from zero.
func (r *roundRobin[T]) remove(flow string, item T) bool {
	q := r.queues[flow]
	i := slices.Index(q, item)
	if i < 0 {
		return false
	}
	r.n--
	if len(q) == 1 {
		delete(r.queues, flow)
		turns := r.turnsOf(flow)
		*turns = slices.DeleteFunc(*turns, func(f string) bool { return f == flow })
		if len(r.backgroundTurns) == 0 {
			r.passed = 0
		}
		return true
	}
	r.queues[flow] = slices.Delete(q, i, i+1)
	return true
}

// len returns the number of waiting requests.
func (r *roundRobin[T]) len() int { return r.n }
