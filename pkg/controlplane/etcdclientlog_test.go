package controlplane

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestRedirectEtcdClientLog checks that the apiserver's etcd client logger
// is replaced by one writing warnings, as JSON lines, where it is told, and
// that a later control plane's log takes the lines over.
func TestRedirectEtcdClientLog(t *testing.T) {
	var first, second bytes.Buffer
	redirectEtcdClientLog(&first)
	logger := etcdClientLogger
	logger.Info("not kept")
	logger.Warn("retrying of unary invoker failed", zap.Error(errors.New("etcdserver: mvcc: required revision has been compacted")))
	if got := first.String(); !strings.Contains(got, `"level":"warn"`) || !strings.Contains(got, "required revision has been compacted") || !strings.Contains(got, `"logger":"etcd-client"`) {
		t.Errorf("first log holds %q, want the warning as a JSON line", got)
	}
	if strings.Contains(first.String(), "not kept") {
		t.Errorf("an info line was logged: %q", first.String())
	}
	redirectEtcdClientLog(&second)
	if etcdClientLogger != logger {
		t.Errorf("the logger was replaced again; clients made earlier would keep writing to the old log")
	}
	logger.Warn("later")
	if strings.Contains(first.String(), "later") || !strings.Contains(second.String(), "later") {
		t.Errorf("after the second redirect: first %q, second %q", first.String(), second.String())
	}
}

// linkedEtcdClientLogger is etcdClientLogger as the apiserver's storage
// package set it when it was initialised, before anything here replaced it.
var linkedEtcdClientLogger = etcdClientLogger

// TestEtcdClientLoggerIsTheApiserversOwn fails when etcdClientLogger no
// longer names the apiserver's variable (renamed by a Kubernetes upgrade):
// the declaration would then be a variable of ours, nil until replaced.
func TestEtcdClientLoggerIsTheApiserversOwn(t *testing.T) {
	if linkedEtcdClientLogger == nil {
		t.Fatal("etcdClientLogger was nil before it was replaced: it no longer names k8s.io/apiserver's etcd3ClientLogger")
	}
}
