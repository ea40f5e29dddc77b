package kafkatest

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
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/testassets"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
)

// PKI is a throwaway certificate authority with a broker certificate for 127.0.0.1/localhost and a client
// certificate, written as PEM files into a test's temporary directory.
type PKI struct {
	// CAFile is the PEM CA certificate that signed both certificates.
	CAFile string
	// ClientCertFile and ClientKeyFile are a PEM client certificate and key signed by the CA.
	ClientCertFile, ClientKeyFile string
	// Server is the broker's TLS config (its certificate; client certificates are checked against the CA when
	// ClientAuth is set on it).
	Server *tls.Config
	// CAPool holds the CA certificate.
	CAPool *x509.CertPool
}

// NewPKI makes a PKI for t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caDER := makeCert(t, "draftflow test CA", nil, nil, true)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, srvDER := makeCert(t, "localhost", caCert, caKey, false)
	cliKey, cliDER := makeCert(t, "draftflow-client", caCert, caKey, false)
	p := &PKI{CAFile: filepath.Join(dir, "ca.pem"), ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile: filepath.Join(dir, "client-key.pem"), CAPool: x509.NewCertPool()}
	p.CAPool.AddCert(caCert)
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)
	writePEM(t, p.ClientCertFile, "CERTIFICATE", cliDER)
	writePEM(t, p.ClientKeyFile, "EC PRIVATE KEY", marshalKey(t, cliKey))
	p.Server = &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: p.CAPool,
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER, caDER}, PrivateKey: srvKey}}}
	return p
}

func makeCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func marshalKey(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SecureEmbedded starts an embedded broker for t that speaks TLS with pki's broker certificate (requiring a
// client certificate when requireClientCert) and authenticates users over SASL; it is closed when the test
// ends.
func SecureEmbedded(t testing.TB, pki *PKI, requireClientCert bool, users ...embedded.User) *embedded.Broker {
	t.Helper()
	srv := pki.Server.Clone()
	if requireClientCert {
		srv.ClientAuth = tls.RequireAndVerifyClientCert
	}
	e, err := embedded.Start(embedded.Config{TLS: srv, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// SASLBroker is a real broker's SASL_SSL listener, as `KAFKA_SASL_SSL=1 deploy/kafka/kafka.sh up` starts one
// and `kafka.sh env` describes it (DRAFTFLOW_TEST_SASL_BROKERS, _CA_FILE, _USERNAME, _PASSWORD_FILE).
type SASLBroker struct {
	// Brokers is the SASL_SSL bootstrap list.
	Brokers []string
	// CAFile is the PEM CA of the listener's certificate.
	CAFile string
	// Username and PasswordFile are a user known to PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
	Username, PasswordFile string
}

// Security returns the settings of the listener for one mechanism, the password read from its file.
func (b SASLBroker) Security(mechanism string) kafka.Security {
	return kafka.Security{TLS: kafka.TLS{CAFile: b.CAFile},
		SASL: kafka.SASL{Mechanism: mechanism, Username: b.Username, PasswordFile: b.PasswordFile}}
}

// RealSASL returns the real broker's SASL_SSL listener from the environment. Without one the test is skipped,
// except in a run against real Kafka (DRAFTFLOW_TEST_BROKERS) under DRAFTFLOW_REQUIRE_ASSETS (CI's
// `make test-integration`, whose broker has the listener), where it fails.
func RealSASL(t testing.TB) SASLBroker {
	t.Helper()
	b := SASLBroker{CAFile: os.Getenv("DRAFTFLOW_TEST_SASL_CA_FILE"), Username: os.Getenv("DRAFTFLOW_TEST_SASL_USERNAME"),
		PasswordFile: os.Getenv("DRAFTFLOW_TEST_SASL_PASSWORD_FILE")}
	if s := os.Getenv("DRAFTFLOW_TEST_SASL_BROKERS"); s != "" {
		b.Brokers = strings.Split(s, ",")
	}
	if len(b.Brokers) > 0 && b.CAFile != "" && b.Username != "" && b.PasswordFile != "" {
		return b
	}
	msg := "no secured Kafka broker: set DRAFTFLOW_TEST_SASL_BROKERS, _CA_FILE, _USERNAME and _PASSWORD_FILE " +
		"(`KAFKA_SASL_SSL=1 deploy/kafka/kafka.sh up`, then `export $(deploy/kafka/kafka.sh env)`; make test-integration does both)"
	if Real() && testassets.Required() {
		t.Fatal(msg + " (DRAFTFLOW_REQUIRE_ASSETS is set)")
	}
	t.Skip(msg)
	return b
}
