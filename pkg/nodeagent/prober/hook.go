package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// hookUserAgent is the User-Agent of httpGet hooks, the kubelet's.
const hookUserAgent = "kube-lifecycle/1.36"

// UnsupportedHook returns why the agent cannot run hook h against an
// attempt whose handle is hd, "" when it can. Only exec hooks need
// anything: a runtime that can run commands in its containers. A handler
// the kubelet cannot run either (tcpSocket, none) is not refused here: it
// fails when run, as the kubelet's.
func UnsupportedHook(h *corev1.LifecycleHandler, hd runtime.Handle) string {
	if h.Exec == nil {
		return ""
	}
	if _, ok := hd.(runtime.Execer); !ok {
		return "this runtime cannot run commands in containers"
	}
	return ""
}

// HookRun is one run of a hook's handler against one attempt.
type HookRun struct {
	// Handler is the hook.
	Handler *corev1.LifecycleHandler
	// Container is the container's spec.
	Container *corev1.Container
	// PodRef names the pod in messages: "name_namespace(uid)".
	PodRef string
	// Handle is the attempt.
	Handle runtime.Handle
	// PodIP is the pod's address, which an httpGet without a host
	// reaches; empty: the node's.
	PodIP string
	// clock times sleep hooks.
	Clock clock.Clock
	// Record records an event on the pod.
	Record func(eventType, reason, message string)
}

// Run runs the handler as the kubelet's handlerRunner does and returns
// the kubelet's failure message with the error; nil when it succeeded.
//   - exec runs the command inside the container (not expanded, no
//     timeout): a non-zero exit code fails;
//   - httpGet sends the request (no timeout): only an error fails, the
//     status code does not count; an HTTPS request answered in plain HTTP
//     is retried with HTTP (LifecycleHTTPFallback event);
//   - sleep waits sleep.seconds; ending early (ctx) fails;
//   - anything else (tcpSocket, deprecated and never supported) fails.
func (r HookRun) Run(ctx context.Context) (string, error) {
	h, c := r.Handler, r.Container
	switch {
	case h.Exec != nil:
		ex, ok := r.Handle.(runtime.Execer)
		if !ok {
			err := errors.New(UnsupportedHook(h, r.Handle))
			return fmt.Sprintf("Cannot run handler: %v", err), err
		}
		out, code, err := ExecCapture(ctx, ex, h.Exec.Command, 0)
		if err == nil && code != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), code, out)
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, r.PodRef, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := r.httpGet(ctx); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, r.PodRef, err), err
		}
		return "", nil
	case h.Sleep != nil:
		t := r.Clock.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			err := errors.New("container terminated before sleep hook finished")
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, r.PodRef, err), err
		case <-t.C():
			return "", nil
		}
	default:
		err := fmt.Errorf("invalid handler: %v", h)
		return fmt.Sprintf("Cannot run handler: %v", err), err
	}
}

// httpGet sends an httpGet hook's request as the kubelet's lifecycle
// client: certificates are not verified, redirects to another host are not
// followed, the answer's status is not looked at, and an HTTPS request that
// got a plain HTTP answer is sent again with HTTP.
func (r HookRun) httpGet(ctx context.Context) error {
	req, err := HTTPRequest(ctx, r.Handler.HTTPGet, r.Container, r.PodIP, hookUserAgent)
	if err != nil {
		return err
	}
	client := HTTPClient(0)
	res, err := client.Do(req)
	discardBody(res)
	var uerr *url.Error
	if err == nil || !errors.As(err, &uerr) || !strings.Contains(uerr.Err.Error(), "server gave HTTP response to HTTPS client") {
		return err
	}
	retry := req.Clone(ctx)
	retry.URL.Scheme = "http"
	retry.Header.Del("Authorization")
	res, herr := client.Do(retry)
	discardBody(res)
	if herr != nil {
		return err
	}
	r.Record(corev1.EventTypeWarning, lifecycle.ReasonLifecycleHTTPFallback, fmt.Sprintf("request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", retry.URL.Host))
	return nil
}

// discardBody reads up to MaxOutput of an answer and closes it.
func discardBody(res *http.Response) {
	if res == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, MaxOutput))
	_ = res.Body.Close()
}
