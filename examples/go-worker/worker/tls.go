package worker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// AuthorizationMetadataKey carries the worker's bearer token ("Bearer TOKEN") on
// every stream, when it has one.
const AuthorizationMetadataKey = "authorization"

// ClientTLS is how the worker connects to pollers that serve TLS: caFile is the CA
// that signed the pollers' certificates ("" = the system's roots); certFile and
// keyFile (both or neither) are the worker's own certificate, for pollers that
// require one (mTLS). Each poller's certificate must name the host the worker dials.
// An error names the flag whose file is wrong.
func ClientTLS(caFile, certFile, keyFile string) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca: %s holds no PEM certificate", caFile)
		}
	}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case certFile != "":
		return nil, fmt.Errorf("-tls-cert needs -tls-key")
	case keyFile != "":
		return nil, fmt.Errorf("-tls-key needs -tls-cert")
	}
	return credentials.NewTLS(cfg), nil
}
