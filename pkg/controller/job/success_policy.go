package job

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
)

// successPolicyMatchedMsg prefixes the message of the SuccessCriteriaMet
// (and then Complete) condition of a Job declared successful by its
// successPolicy; the index of the first matching rule follows.
const successPolicyMatchedMsg = "Matched rules at index"

// matchSuccessPolicy reports whether the succeeded indexes of an Indexed Job
// satisfy one of the rules of its successPolicy, and if so returns the
// condition message naming the first rule that does. Rules are tried in
// order:
//   - a rule with succeededIndexes matches when every index of that set
//     succeeded, or, if it also sets succeededCount, when at least that many
//     of them did; a set that parses to nothing (malformed) never matches;
//   - a rule with only succeededCount matches when at least that many
//     indexes succeeded in total.
//
// Nothing matches while no index succeeded.
func matchSuccessPolicy(policy *batchv1.SuccessPolicy, completions int32, succeeded indexSet) (string, bool) {
	if policy == nil || len(succeeded) == 0 {
		return "", false
	}
	for i, rule := range policy.Rules {
		matched := false
		switch {
		case rule.SucceededIndexes != nil:
			required := parseIndexSet(*rule.SucceededIndexes, int(completions))
			if len(required) == 0 {
				continue
			}
			got := required.overlap(succeeded)
			matched = got == required.count() || (rule.SucceededCount != nil && got >= int(*rule.SucceededCount))
		case rule.SucceededCount != nil:
			matched = succeeded.count() >= int(*rule.SucceededCount)
		}
		if matched {
			return fmt.Sprintf("%s %d", successPolicyMatchedMsg, i), true
		}
	}
	return "", false
}

// overlap returns how many indexes are in both s and o. Both sets are
// sorted, so one pass over each suffices.
func (s indexSet) overlap(o indexSet) int {
	n := 0
	for i, j := 0, 0; i < len(s) && j < len(o); {
		lo, hi := max(s[i].first, o[j].first), min(s[i].last, o[j].last)
		if hi >= lo {
			n += hi - lo + 1
		}
		// Advance whichever span ends first; both if they end together.
		switch {
		case s[i].last < o[j].last:
			i++
		case o[j].last < s[i].last:
			j++
		default:
			i++
			j++
		}
	}
	return n
}
