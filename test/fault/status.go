package fault

import (
	"encoding/json"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus answers an error the way the apiserver does: a JSON
// metav1.Status with code and reason. retryAfter, if positive, is sent as
// the Retry-After header (in seconds) and in the status details.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, retryAfter int32) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
	}
	h := w.Header()
	if retryAfter > 0 {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfter}
		h.Set("Retry-After", strconv.Itoa(int(retryAfter)))
	}
	body, err := json.Marshal(&st)
	if err != nil {
		// A Status always marshals; answer the code alone if not.
		w.WriteHeader(code)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
