package redisserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// testPKI is one CA with a server and a client certificate, shared by every
// TLS server of the test binary so that replicas, Sentinels and clients of
// different servers trust each other.
type testPKI struct {
	caPEM, serverCertPEM, serverKeyPEM, clientCertPEM, clientKeyPEM []byte
	tlsConfig                                                       *tls.Config
}

var (
	pkiOnce sync.Once
	pki     *testPKI
	pkiErr  error
)

func sharedPKI() (*testPKI, error) {
	pkiOnce.Do(func() { pki, pkiErr = newPKI() })
	return pki, pkiErr
}

func newPKI() (*testPKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "redisserver test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, usages ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(7 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usages,
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
	}
	p := &testPKI{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	// The server certificate also allows client use: Redis presents it when a
	// replica or Sentinel connects to a TLS master.
	if p.serverCertPEM, p.serverKeyPEM, err = leaf("redisserver test server", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if p.clientCertPEM, p.clientKeyPEM, err = leaf("redisserver test client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	clientCert, err := tls.X509KeyPair(p.clientCertPEM, p.clientKeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.tlsConfig = &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{clientCert},
		MinVersion:   tls.VersionTLS12,
	}
	return p, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// writeTLSFiles writes the shared CA and certificates into dir and returns their
// paths and a client configuration trusting the CA and presenting the client
// certificate.
func writeTLSFiles(t testing.TB, dir string) (*TLSFiles, *tls.Config) {
	t.Helper()
	p, err := sharedPKI()
	if err != nil {
		t.Fatalf("redisserver: generating TLS certificates: %v", err)
	}
	f := &TLSFiles{
		CAFile:         filepath.Join(dir, "ca.crt"),
		CertFile:       filepath.Join(dir, "server.crt"),
		KeyFile:        filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	for path, data := range map[string][]byte{
		f.CAFile:         p.caPEM,
		f.CertFile:       p.serverCertPEM,
		f.KeyFile:        p.serverKeyPEM,
		f.ClientCertFile: p.clientCertPEM,
		f.ClientKeyFile:  p.clientKeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatalf("redisserver: writing TLS files: %v", err)
		}
	}
	return f, p.tlsConfig.Clone()
}
