package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// Settings of ServeAuthenticated's delegated authentication and
// authorization: kube-controller-manager's defaults.
const (
	// reviewCacheTTL is how long a TokenReview or SubjectAccessReview
	// answer is reused.
	reviewCacheTTL = 10 * time.Second
	// tokenReviewTimeout bounds one TokenReview.
	tokenReviewTimeout = 10 * time.Second
)

// ServeAuthenticated serves handler over HTTPS on the TCP address addr (port
// 0 picks a free port) until ctx is done, as kube-controller-manager serves
// its secure port: the apiserver's serving certificate; callers
// authenticated by a client certificate signed by the cluster CA or by a
// bearer token the apiserver accepts (TokenReview); each request authorized
// by the apiserver (SubjectAccessReview: a non-resource URL, e.g. get on
// /metrics). Anonymous requests get 401, requests the apiserver does not
// allow 403. It returns the address served once it listens, and a channel
// closed when the server has stopped.
func (cp *ControlPlane) ServeAuthenticated(ctx context.Context, addr string, handler http.Handler) (string, <-chan struct{}, error) {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return "", nil, err
	}
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", cp.pki.CACert())
	if err != nil {
		return "", nil, fmt.Errorf("loading the cluster CA: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            client.AuthenticationV1(),
		TokenAccessReviewTimeout:           tokenReviewTimeout,
		WebhookRetryBackoff:                genericoptions.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                           reviewCacheTTL,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return "", nil, fmt.Errorf("building the authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             reviewCacheTTL,
		DenyCacheTTL:              reviewCacheTTL,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return "", nil, fmt.Errorf("building the authorizer: %w", err)
	}
	chain := genericapifilters.WithAuthorization(handler, authz, scheme.Codecs)
	chain = genericapifilters.WithAuthentication(chain, authn, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	chain = genericapifilters.WithRequestInfo(chain, &apirequest.RequestInfoFactory{})

	cert, err := tls.LoadX509KeyPair(cp.pki.ServingCert(), cp.pki.ServingKey())
	if err != nil {
		return "", nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(cp.pki.CACert())
	if err != nil {
		return "", nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", nil, fmt.Errorf("no certificate in %s", cp.pki.CACert())
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler: chain,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			// A certificate is optional (bearer tokens are the other way
			// in) but, when given, must chain to the cluster CA.
			ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs:  pool,
			NextProtos: []string{"h2", "http/1.1"},
		},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          klog.NewStandardLogger("INFO"),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Secure endpoint stopped", "address", l.Addr().String())
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return l.Addr().String(), done, nil
}
