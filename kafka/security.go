package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/draftflow/draftflow/secret"
)

// Security says how a client proves who it is and protects its connections: TLS and SASL. The zero value is a
// plaintext, unauthenticated connection (PLAINTEXT), as the embedded broker and kafka.sh's default listener
// speak. Every client this package builds (producers, consumers, readers and the admin client) applies it.
type Security struct {
	// TLS encrypts connections and checks the brokers' certificates.
	TLS TLS
	// SASL authenticates the client (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512).
	SASL SASL
}

// TLS configures the TLS layer of broker connections.
type TLS struct {
	// Enabled turns TLS on. Setting any file below turns it on too.
	Enabled bool
	// CAFile is a PEM file of the certificate authorities that sign the brokers' certificates (default: the
	// system's roots).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for brokers that require client
	// certificates (ssl.client.auth=required). Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry (default: the host of each broker address).
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. Only for tests: it makes TLS open to interception.
	InsecureSkipVerify bool
}

// SASL configures SASL authentication.
type SASL struct {
	// Mechanism is "" (no SASL), "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512" (case does not matter).
	Mechanism string
	// Username is the SASL user.
	Username string
	// Password is the user's password. It never appears in logs, errors or printed configs (see secret.Value).
	Password secret.Value
	// PasswordFile, when Password is empty, is a file whose content (trailing newline removed) is the password.
	// It is read each time a consumer, reader or producer is built; the admin requests of a Client share one
	// client, built with the password read at its first request.
	PasswordFile string
}

// SASL mechanism names.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// tlsOn reports whether connections use TLS.
func (t TLS) tlsOn() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// mechanism returns the canonical mechanism name, or an error naming the unknown one.
func (s SASL) mechanism() (string, error) {
	m := strings.ToUpper(strings.TrimSpace(s.Mechanism))
	switch m {
	case "", MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		return m, nil
	case "SCRAM-SHA256", "SCRAM_SHA_256":
		return MechanismSCRAMSHA256, nil
	case "SCRAM-SHA512", "SCRAM_SHA_512":
		return MechanismSCRAMSHA512, nil
	}
	return "", fmt.Errorf("kafka: unknown SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
}

// password returns the password, read from PasswordFile when Password is empty.
func (s SASL) password() (secret.Value, error) {
	if !s.Password.IsZero() || s.PasswordFile == "" {
		return s.Password, nil
	}
	b, err := os.ReadFile(s.PasswordFile)
	if err != nil {
		return secret.Value{}, fmt.Errorf("kafka: SASL password file: %w", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return secret.Value{}, fmt.Errorf("kafka: SASL password file %s is empty", s.PasswordFile)
	}
	return secret.New(p), nil
}

// Validate checks the settings and reads every file they name (CA, client certificate and key, password), so
// a command fails at start, with an error naming the setting, rather than at its first connection.
func (s Security) Validate() error {
	_, err := s.resolve()
	return err
}

// Describe returns the settings for a log line: the protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the
// mechanism and the user; never the password.
func (s Security) Describe() []any {
	proto := "PLAINTEXT"
	m, _ := s.SASL.mechanism()
	switch {
	case m != "" && s.TLS.tlsOn():
		proto = "SASL_SSL"
	case m != "":
		proto = "SASL_PLAINTEXT"
	case s.TLS.tlsOn():
		proto = "SSL"
	}
	out := []any{"security_protocol", proto}
	if m != "" {
		out = append(out, "sasl_mechanism", m, "sasl_user", s.SASL.Username)
	}
	if s.TLS.InsecureSkipVerify {
		out = append(out, "tls_insecure_skip_verify", true)
	}
	return out
}

// resolved is Security with its files read: what the clients are built from.
type resolved struct {
	tls       *tls.Config // nil: plaintext
	mechanism string      // "" : no SASL
	user      string
	password  secret.Value
}

// resolve reads the files Security names and checks the combination.
func (s Security) resolve() (resolved, error) {
	var r resolved
	m, err := s.SASL.mechanism()
	if err != nil {
		return r, err
	}
	if m != "" {
		if s.SASL.Username == "" {
			return r, fmt.Errorf("kafka: SASL %s needs a username (--kafka-sasl-username or DRAFTFLOW_KAFKA_SASL_USERNAME)", m)
		}
		pw, err := s.SASL.password()
		if err != nil {
			return r, err
		}
		if pw.IsZero() {
			return r, fmt.Errorf("kafka: SASL %s for user %q needs a password (--kafka-sasl-password-file, DRAFTFLOW_KAFKA_SASL_PASSWORD_FILE or DRAFTFLOW_KAFKA_SASL_PASSWORD)",
				m, s.SASL.Username)
		}
		r.mechanism, r.user, r.password = m, s.SASL.Username, pw
	} else if s.SASL.Username != "" || !s.SASL.Password.IsZero() || s.SASL.PasswordFile != "" {
		return r, errors.New("kafka: a SASL username or password is set but no mechanism (--kafka-sasl-mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
	}
	if !s.TLS.tlsOn() {
		return r, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.TLS.ServerName, InsecureSkipVerify: s.TLS.InsecureSkipVerify} //nolint:gosec // only when asked
	if s.TLS.CAFile != "" {
		pem, err := os.ReadFile(s.TLS.CAFile)
		if err != nil {
			return r, fmt.Errorf("kafka: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return r, fmt.Errorf("kafka: TLS CA file %s holds no PEM certificate", s.TLS.CAFile)
		}
		tc.RootCAs = pool
	}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		return r, errors.New("kafka: a TLS client certificate needs both --kafka-tls-cert-file and --kafka-tls-key-file")
	}
	if s.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLS.CertFile, s.TLS.KeyFile)
		if err != nil {
			return r, fmt.Errorf("kafka: TLS client certificate %s / key %s: %w", s.TLS.CertFile, s.TLS.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	r.tls = tc
	return r, nil
}

// franzOpts returns the franz-go options of TLS and SASL, the one place they are mapped; wrap, when not nil,
// wraps the SASL mechanism.
func (r resolved) franzOpts(wrap func(sasl.Mechanism) sasl.Mechanism) []kgo.Opt {
	var opts []kgo.Opt
	if r.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(r.tls.Clone()))
	}
	if m := r.franzSASL(); m != nil {
		if wrap != nil {
			m = wrap(m)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// franzSASL returns franz-go's mechanism, or nil without SASL.
func (r resolved) franzSASL() sasl.Mechanism {
	auth := scram.Auth{User: r.user, Pass: r.password.Reveal()}
	switch r.mechanism {
	case MechanismPlain:
		return plain.Auth{User: r.user, Pass: r.password.Reveal()}.AsMechanism()
	case MechanismSCRAMSHA256:
		return auth.AsSha256Mechanism()
	case MechanismSCRAMSHA512:
		return auth.AsSha512Mechanism()
	}
	return nil
}

// ErrAuthentication is wrapped by every error this package returns when the brokers refuse the client's
// credentials or certificate: a SASL authentication failure, a mechanism the broker does not enable, or a TLS
// handshake that failed. Retrying cannot help; the command stops and says which credentials failed.
var ErrAuthentication = errors.New("authentication failed")

// errSASLRefused is a SASL exchange the broker ended by closing the connection (Ping).
var errSASLRefused = errors.New("SASL authentication refused")

// AuthError is an authentication failure, naming the mechanism and user (never the password).
type AuthError struct {
	// Mechanism is the SASL mechanism, or "TLS" for a handshake failure.
	Mechanism string
	// User is the SASL user ("" for TLS).
	User string
	// Brokers are the bootstrap brokers.
	Brokers []string
	// Err is the client library's error.
	Err error
}

func (e *AuthError) Error() string {
	if e.Mechanism == "TLS" {
		return fmt.Sprintf("kafka: TLS connection to %v failed (%v): check --kafka-tls-ca-file, the client certificate and --kafka-tls-server-name: %v",
			e.Brokers, ErrAuthentication, e.Err)
	}
	return fmt.Sprintf("kafka: SASL %s %v for user %q at %v: check the username and password, and that the broker enables %s for this listener: %v",
		e.Mechanism, ErrAuthentication, e.User, e.Brokers, e.Mechanism, e.Err)
}

// Unwrap returns ErrAuthentication and the library's error.
func (e *AuthError) Unwrap() []error { return []error{ErrAuthentication, e.Err} }

// IsAuthError reports whether err is an authentication failure (see ErrAuthentication).
func IsAuthError(err error) bool {
	return err != nil && (errors.Is(err, ErrAuthentication) || authCause(err) != "")
}

// authCause classifies err as "sasl", "tls" or "" (not an authentication failure).
func authCause(err error) string {
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) || errors.Is(err, errSASLRefused) {
		return "sasl"
	}
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	var verr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	if errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) || errors.As(err, &verr) || errors.As(err, &rerr) {
		return "tls"
	}
	return ""
}

// authError wraps err in an AuthError when it is an authentication failure, and returns it unchanged otherwise.
func (c Config) authError(err error) error {
	if err == nil || errors.Is(err, ErrAuthentication) {
		return err
	}
	switch authCause(err) {
	case "sasl":
		m, _ := c.Security.SASL.mechanism()
		return &AuthError{Mechanism: m, User: c.Security.SASL.Username, Brokers: c.Brokers, Err: err}
	case "tls":
		return &AuthError{Mechanism: "TLS", Brokers: c.Brokers, Err: err}
	}
	return err
}
