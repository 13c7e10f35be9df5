package fairqueue

import "slices"

// roundRobin holds the requests waiting in every flow and decides which one
// the next token goes to. Flows take turns, one request per turn, in the
// order in which they last started waiting; within a flow, requests keep
// their order. So a flow that starts waiting is served after at most one
// request of each flow already waiting, and a flow that keeps waiting is
// served once per round whatever other flows do. It is not safe for
// concurrent use.
type roundRobin[T comparable] struct {
	// queues are the waiting requests of each flow, oldest first; a flow
	// with none has no entry.
	queues map[string][]T
	// turns are the flows with waiting requests, the next to be served first.
	turns []string
	// n is the number of waiting requests.
	n int
}

// newRoundRobin returns an empty roundRobin.
func newRoundRobin[T comparable]() *roundRobin[T] {
	return &roundRobin[T]{queues: map[string][]T{}}
}

// push adds item at the end of flow's requests; a flow that had none takes
// the last turn.
func (r *roundRobin[T]) push(flow string, item T) {
	q, waiting := r.queues[flow]
	if !waiting {
		r.turns = append(r.turns, flow)
	}
	r.queues[flow] = append(q, item)
	r.n++
}

// pop takes the oldest request of the flow whose turn it is, and moves that
// flow to the last turn if it has more. ok is false if nothing waits.
func (r *roundRobin[T]) pop() (item T, flow string, ok bool) {
	if len(r.turns) == 0 {
		return item, "", false
	}
	flow = r.turns[0]
	r.turns = r.turns[1:]
	q := r.queues[flow]
	item = q[0]
	if len(q) == 1 {
		delete(r.queues, flow)
	} else {
		r.queues[flow] = q[1:]
		r.turns = append(r.turns, flow)
	}
	r.n--
	return item, flow, true
}

// remove takes item out of flow's requests (a caller that stopped waiting)
// and reports whether it was waiting. A flow left with none loses its turn.
func (r *roundRobin[T]) remove(flow string, item T) bool {
	q := r.queues[flow]
	i := slices.Index(q, item)
	if i < 0 {
		return false
	}
	r.n--
	if len(q) == 1 {
		delete(r.queues, flow)
		r.turns = slices.DeleteFunc(r.turns, func(f string) bool { return f == flow })
		return true
	}
	r.queues[flow] = slices.Delete(q, i, i+1)
	return true
}

// len returns the number of waiting requests.
func (r *roundRobin[T]) len() int { return r.n }
