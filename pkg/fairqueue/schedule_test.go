package fairqueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// op is one step of a roundRobin table test: push flow/item, pop, or
// remove flow/item.
type op struct {
	push, remove bool
	flow         string
	item         int
}

func push(flow string, item int) op   { return op{push: true, flow: flow, item: item} }
func remove(flow string, item int) op { return op{remove: true, flow: flow, item: item} }

var pop = op{}

// popped is what a pop or a remove returned.
type popped struct {
	Flow string
	Item int
	OK   bool
}

func TestRoundRobin(t *testing.T) {
	cases := map[string]struct {
		ops  []op
		want []popped
		// wantLen is the number of items left waiting.
		wantLen int
	}{
		"empty": {
			ops:  []op{pop},
			want: []popped{{}},
		},
		"one flow keeps its order": {
			ops:  []op{push("a", 1), push("a", 2), push("a", 3), pop, pop, pop, pop},
			want: []popped{{"a", 1, true}, {"a", 2, true}, {"a", 3, true}, {}},
		},
		"a flow with one request is served after one of a busy flow's": {
			ops: []op{push("big", 1), push("big", 2), push("big", 3), push("big", 4), push("small", 10),
				pop, pop, pop, pop, pop},
			want: []popped{{"big", 1, true}, {"small", 10, true}, {"big", 2, true}, {"big", 3, true}, {"big", 4, true}},
		},
		"flows take turns, one request each": {
			ops: []op{push("a", 1), push("a", 2), push("b", 3), push("b", 4), push("c", 5),
				pop, pop, pop, pop, pop},
			want: []popped{{"a", 1, true}, {"b", 3, true}, {"c", 5, true}, {"a", 2, true}, {"b", 4, true}},
		},
		"a flow that arrives waits for the flows already waiting": {
			ops:  []op{push("a", 1), push("a", 2), push("b", 3), pop, push("c", 4), pop, pop, pop},
			want: []popped{{"a", 1, true}, {"b", 3, true}, {"a", 2, true}, {"c", 4, true}},
		},
		"a busy flow is never starved by flows that come and go": {
			ops: []op{push("big", 1), push("big", 2), push("big", 3),
				push("s1", 10), pop, push("s2", 11), pop, push("s3", 12), pop, push("s4", 13), pop, pop, pop},
			want: []popped{{"big", 1, true}, {"s1", 10, true}, {"big", 2, true}, {"s2", 11, true}, {"s3", 12, true}, {"big", 3, true}},
			// s4 is still waiting: it arrived after big's turn came round.
			wantLen: 1,
		},
		"the flow without a name is a flow like the others": {
			ops:  []op{push("", 1), push("", 2), push("a", 3), pop, pop, pop},
			want: []popped{{"", 1, true}, {"a", 3, true}, {"", 2, true}},
		},
		"remove takes a waiting item out": {
			ops:  []op{push("a", 1), push("a", 2), push("b", 3), remove("a", 1), pop, pop},
			want: []popped{{"a", 1, true}, {"a", 2, true}, {"b", 3, true}},
		},
		"removing a flow's last item ends its turn": {
			ops:  []op{push("a", 1), push("b", 2), push("c", 3), remove("b", 2), pop, pop, pop},
			want: []popped{{"b", 2, true}, {"a", 1, true}, {"c", 3, true}, {}},
		},
		"removing what is not waiting does nothing": {
			ops:  []op{push("a", 1), pop, remove("a", 1), remove("b", 7), push("a", 2), pop},
			want: []popped{{"a", 1, true}, {"a", 1, false}, {"b", 7, false}, {"a", 2, true}},
		},
		"a flow that emptied comes back at the end of the turns": {
			ops:  []op{push("a", 1), push("b", 2), push("b", 3), pop, push("a", 4), pop, pop, pop},
			want: []popped{{"a", 1, true}, {"b", 2, true}, {"a", 4, true}, {"b", 3, true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRoundRobin[int](nil, 1)
			check(t, r, tc.ops, tc.want, tc.wantLen)
		})
	}
}

func TestRoundRobinBackground(t *testing.T) {
	// "ev" and "ttl" are background flows; one in every 2 tokens may go to
	// them while other flows wait.
	background := []string{"ev", "ttl"}
	cases := map[string]struct {
		ops     []op
		want    []popped
		wantLen int
	}{
		"a background flow alone has every token": {
			ops:  []op{push("ev", 1), push("ev", 2), pop, pop, pop},
			want: []popped{{"ev", 1, true}, {"ev", 2, true}, {}},
		},
		"a background flow waits for every 2 tokens of the others": {
			ops: []op{push("ev", 1), push("ev", 2), push("a", 10), push("a", 11), push("b", 20), push("b", 21),
				pop, pop, pop, pop, pop, pop},
			want: []popped{{"a", 10, true}, {"b", 20, true}, {"ev", 1, true}, {"a", 11, true}, {"b", 21, true}, {"ev", 2, true}},
		},
		"a background flow has the tokens the others leave": {
			ops:  []op{push("a", 10), push("ev", 1), push("ev", 2), pop, pop, pop},
			want: []popped{{"a", 10, true}, {"ev", 1, true}, {"ev", 2, true}},
		},
		"tokens given while no background flow waited do not count": {
			ops: []op{push("a", 10), push("a", 11), push("a", 12), push("a", 13), pop, pop,
				push("ev", 1), pop, pop, pop},
			want: []popped{{"a", 10, true}, {"a", 11, true}, {"a", 12, true}, {"a", 13, true}, {"ev", 1, true}},
		},
		"background flows take turns among themselves": {
			ops: []op{push("ev", 1), push("ev", 2), push("ttl", 5), push("a", 10), push("a", 11), push("a", 12),
				push("a", 13), pop, pop, pop, pop, pop, pop, pop},
			want: []popped{{"a", 10, true}, {"a", 11, true}, {"ev", 1, true}, {"a", 12, true}, {"a", 13, true},
				{"ttl", 5, true}, {"ev", 2, true}},
		},
		"the count restarts when the background flows stop waiting": {
			ops: []op{push("a", 10), push("a", 11), push("a", 12), push("ev", 1), pop, remove("ev", 1),
				push("ev", 2), pop, pop, pop},
			want: []popped{{"a", 10, true}, {"ev", 1, true}, {"a", 11, true}, {"a", 12, true}, {"ev", 2, true}},
		},
		"removing a background flow's item": {
			ops:  []op{push("ev", 1), push("ev", 2), push("a", 10), remove("ev", 2), pop, pop, pop},
			want: []popped{{"ev", 2, true}, {"a", 10, true}, {"ev", 1, true}, {}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRoundRobin[int](background, 2)
			check(t, r, tc.ops, tc.want, tc.wantLen)
		})
	}
}

// check carries out ops on r and compares what they returned, and the
// items left, with want and wantLen.
func check(t *testing.T, r *roundRobin[int], ops []op, want []popped, wantLen int) {
	t.Helper()
	var got []popped
	for _, o := range ops {
		switch {
		case o.push:
			r.push(o.flow, o.item)
		case o.remove:
			got = append(got, popped{o.flow, o.item, r.remove(o.flow, o.item)})
		default:
			item, flow, ok := r.pop()
			got = append(got, popped{flow, item, ok})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if r.len() != wantLen {
		t.Errorf("len() = %d, want %d", r.len(), wantLen)
	}
}
