package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA made at test time, with a poller certificate for 127.0.0.1 and a
// worker (client) certificate, written as PEM files under dir.
type testPKI struct {
	dir    string
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), pool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	p.write(t, "ca.crt", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage, ips ...net.IP) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		p.write(t, name+".crt", "CERTIFICATE", der)
		p.write(t, name+".key", "EC PRIVATE KEY", keyDER)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.server = issue("poller", 2, x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	issue("worker", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func (p *testPKI) write(t *testing.T, name, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(p.file(name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *testPKI) file(name string) string { return filepath.Join(p.dir, name) }

// mtlsPoller serves a fake poller that requires a client certificate from the CA.
func (p *testPKI) mtlsPoller(t *testing.T) (*fakePoller, string) {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})
	fp, srv, addr := startFakePoller(t, grpc.Creds(creds))
	t.Cleanup(srv.Stop)
	return fp, addr
}

func startWorker(t *testing.T, cfg Config) {
	t.Helper()
	cfg.ID, cfg.Slots = "tls-worker", 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestWorkerConnectsWithMutualTLSAndSendsItsToken(t *testing.T) {
	pki := newTestPKI(t)
	fp, addr := pki.mtlsPoller(t)
	creds, err := ClientTLS(pki.file("ca.crt"), pki.file("worker.crt"), pki.file("worker.key"))
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, Config{Targets: []string{addr}, TransportCredentials: creds, Token: "s3cret", Owner: "team-a"})
	var s *fakeStream
	select {
	case s = <-fp.streams:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not connect over mTLS")
	}
	if hello := s.next(t, "hello", 2*time.Second).GetHello(); hello.WorkerId != "tls-worker" {
		t.Fatalf("hello: %v", hello)
	}
	if got := s.md.Get(AuthorizationMetadataKey); len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Fatalf("authorization metadata: %v", got)
	}
	if got := s.md.Get(OwnerMetadataKey); len(got) != 1 || got[0] != "team-a" {
		t.Fatalf("owner metadata: %v", got)
	}
}

func TestWorkerWithoutTheRightCredentialsNeverReachesAnMTLSPoller(t *testing.T) {
	pki := newTestPKI(t)
	caOnly, err := ClientTLS(pki.file("ca.crt"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":              nil,
		"TLS without a cert":     caOnly,
		"mTLS not trusting a CA": mustClientTLS(t, "", pki.file("worker.crt"), pki.file("worker.key")),
	} {
		t.Run(name, func(t *testing.T) {
			fp, addr := pki.mtlsPoller(t)
			startWorker(t, Config{Targets: []string{addr}, TransportCredentials: creds})
			select {
			case <-fp.streams:
				t.Fatal("a stream was opened")
			case <-time.After(time.Second):
			}
		})
	}
}

func mustClientTLS(t *testing.T, ca, cert, key string) credentials.TransportCredentials {
	t.Helper()
	creds, err := ClientTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func TestClientTLSNamesTheFlagOfABadFile(t *testing.T) {
	pki := newTestPKI(t)
	for _, c := range []struct{ ca, cert, key, want string }{
		{ca: pki.file("missing.crt"), want: "-tls-ca"},
		{ca: pki.file("worker.key"), want: "-tls-ca"}, // a key, not a certificate
		{cert: pki.file("worker.crt"), want: "-tls-cert needs -tls-key"},
		{key: pki.file("worker.key"), want: "-tls-key needs -tls-cert"},
		{cert: pki.file("worker.crt"), key: pki.file("poller.key"), want: "-tls-cert/-tls-key"},
	} {
		if _, err := ClientTLS(c.ca, c.cert, c.key); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("ClientTLS(%q, %q, %q) = %v, want an error starting %q", c.ca, c.cert, c.key, err, c.want)
		}
	}
}
