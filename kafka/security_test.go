package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/topics"
)

const testPassword = "hunter2-very-secret"

// TestSecretNeverPrinted: a Config holding a password prints, logs and marshals without it.
func TestSecretNeverPrinted(t *testing.T) {
	cfg := kafka.Config{Brokers: []string{"b:9093"}, Security: kafka.Security{
		SASL: kafka.SASL{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: secret.New(testPassword)},
	}}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, cfg.Security), fmt.Sprintf(verb, cfg.Security.SASL.Password))
	}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		l := slog.New(h(&b))
		l.Info("config", "cfg", cfg, "security", cfg.Security, "password", cfg.Security.SASL.Password)
		l.Info("described", cfg.Security.Describe()...)
		outs = append(outs, b.String())
	}
	j, err := json.Marshal(cfg.Security)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j), string(whole))
	for _, o := range outs {
		if strings.Contains(o, testPassword) || strings.Contains(o, fmt.Sprintf("%x", testPassword)) {
			t.Fatalf("password revealed: %s", o)
		}
	}
	if !strings.Contains(string(j), "[redacted]") {
		t.Errorf("JSON does not say the password is set: %s", j)
	}
	if got := cfg.Security.SASL.Password.Reveal(); got != testPassword {
		t.Errorf("Reveal = %q", got)
	}
}

func TestSecurityValidate(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(testPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pki := kafkatest.NewPKI(t)
	cases := []struct {
		name string
		s    kafka.Security
		want string // "" : valid
	}{
		{"zero", kafka.Security{}, ""},
		{"plain file", kafka.Security{SASL: kafka.SASL{Mechanism: "plain", Username: "u", PasswordFile: pwFile}}, ""},
		{"unknown mechanism", kafka.Security{SASL: kafka.SASL{Mechanism: "GSSAPI", Username: "u", PasswordFile: pwFile}}, "unknown SASL mechanism"},
		{"no user", kafka.Security{SASL: kafka.SASL{Mechanism: "PLAIN", PasswordFile: pwFile}}, "needs a username"},
		{"no password", kafka.Security{SASL: kafka.SASL{Mechanism: "SCRAM-SHA-256", Username: "u"}}, "needs a password"},
		{"empty password file", kafka.Security{SASL: kafka.SASL{Mechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: empty}}, "is empty"},
		{"missing password file", kafka.Security{SASL: kafka.SASL{Mechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: dir + "/nope"}}, "password file"},
		{"user without mechanism", kafka.Security{SASL: kafka.SASL{Username: "u"}}, "no mechanism"},
		{"ca", kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile}}, ""},
		{"bad ca", kafka.Security{TLS: kafka.TLS{CAFile: pwFile}}, "no PEM certificate"},
		{"missing ca", kafka.Security{TLS: kafka.TLS{CAFile: dir + "/nope.pem"}}, "CA file"},
		{"cert without key", kafka.Security{TLS: kafka.TLS{CertFile: pki.ClientCertFile}}, "both"},
		{"client cert", kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}}, ""},
	}
	for _, c := range cases {
		err := c.s.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), testPassword) {
			t.Errorf("%s: error reveals the password: %v", c.name, err)
		}
	}
}

// secureCluster starts an embedded broker speaking SASL over TLS with one user per mechanism, all named alice.
func secureCluster(t *testing.T, requireClientCert bool) (*kafkatest.PKI, []string) {
	pki := kafkatest.NewPKI(t)
	var users []embedded.User
	for _, m := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		users = append(users, embedded.User{Mechanism: m, Name: "alice", Password: testPassword})
	}
	return pki, kafkatest.SecureEmbedded(t, pki, requireClientCert, users...).Brokers()
}

// TestKafkaSASLEmbedded: every client of the package (admin, producer, consumer group, franz-go's TopicID)
// authenticates with each mechanism over TLS; a wrong password fails at once with an AuthError naming the
// mechanism and user.
func TestKafkaSASLEmbedded(t *testing.T) {
	pki, brokers := secureCluster(t, false)
	for _, mech := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			sec := kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile},
				SASL: kafka.SASL{Mechanism: mech, Username: "alice", Password: secret.New(testPassword)}}
			cfg := kafka.Config{Brokers: brokers, Partitions: 2, Namespace: "sec-" + strings.ToLower(mech), Security: sec}
			roundTrip(t, cfg)

			bad := cfg
			bad.Security.SASL.Password = secret.New("wrong-" + testPassword)
			checkAuthFails(t, bad, mech)
		})
	}
}

// TestKafkaMutualTLSEmbedded: a broker that requires client certificates accepts ours and refuses a client
// without one.
func TestKafkaMutualTLSEmbedded(t *testing.T) {
	pki, brokers := secureCluster(t, true)
	sec := kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile},
		SASL: kafka.SASL{Mechanism: kafka.MechanismSCRAMSHA256, Username: "alice", Password: secret.New(testPassword)}}
	roundTrip(t, kafka.Config{Brokers: brokers, Partitions: 2, Namespace: "mtls", Security: sec})

	// A CA that did not sign the broker's certificate: a TLS AuthError, at once.
	other := kafkatest.NewPKI(t)
	bad := kafka.Config{Brokers: brokers, Namespace: "mtls", Security: kafka.Security{TLS: kafka.TLS{CAFile: other.CAFile}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := kafkatest.Client(t, bad).Admin().EnsureTopics(ctx, topics.Retained()...)
	if !kafka.IsAuthError(err) || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("EnsureTopics with the wrong CA: %v, want a TLS authentication error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the TLS failure took %s", d)
	}
}

// roundTrip creates the topics, writes and reads a record and looks up a topic ID through cfg.
func roundTrip(t *testing.T, cfg kafka.Config) {
	t.Helper()
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.Admin().EnsureTopics(ctx, topics.Retained()...); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, cfg, topics.TopicPrompts, kafkatest.Record{Key: "p1", Value: &topics.Prompt{ID: "p1", Dataset: "d"}})
	got := kafkatest.Collect[topics.Prompt](t, cfg, topics.TopicPrompts, 1, 30*time.Second)
	if len(got) != 1 || got[0].ID != "p1" {
		t.Fatalf("read back %v", got)
	}
	id, err := cl.Admin().TopicID(ctx, topics.TopicPrompts)
	if err != nil || id == "" {
		t.Fatalf("TopicID = %q, %v", id, err)
	}
}

// checkAuthFails checks that every client of cfg (whose password is wrong) fails promptly with an AuthError
// naming mech and the user, without the password.
func checkAuthFails(t *testing.T, cfg kafka.Config, mech string) {
	t.Helper()
	checkAuthFailsUser(t, cfg, mech, "alice")
}

func checkAuthFailsUser(t *testing.T, cfg kafka.Config, mech, user string) {
	t.Helper()
	cl := kafkatest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	check := func(what string, start time.Time, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s with a wrong password: no error", what)
		}
		if !kafka.IsAuthError(err) || !errors.Is(err, kafka.ErrAuthentication) {
			t.Errorf("%s: %v, want an authentication error", what, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, mech) || !strings.Contains(msg, strconv.Quote(user)) || !strings.Contains(msg, "authentication failed") {
			t.Errorf("%s: error %q does not name the mechanism, the user and the failure", what, msg)
		}
		if strings.Contains(msg, testPassword) {
			t.Errorf("%s: error reveals the password: %s", what, msg)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s failed only after %s", what, d)
		}
	}
	start := time.Now()
	check("EnsureTopics", start, cl.Admin().EnsureTopics(ctx, topics.Retained()...))
	start = time.Now()
	_, err := cl.Admin().TopicID(ctx, topics.TopicPrompts)
	check("TopicID", start, err)
	start = time.Now()
	_, err = cl.Admin().EndOffsets(ctx, topics.TopicPrompts)
	check("EndOffsets", start, err)
	start = time.Now()
	err = cl.NewConsumer(topics.TopicPrompts, kafka.ConsumerConfig{Group: "g"}).Run(ctx, func(d *kafka.Delivery) { d.Done() })
	check("Consumer.Run", start, err)
	start = time.Now()
	p := cl.NewProducer(topics.TopicPrompts, kafka.ProducerConfig{})
	defer p.Close()
	errc := make(chan error, 1)
	p.SendRetrying(ctx, "k", kafkatest.Encode(t, &topics.Prompt{ID: "k"}), func(err error) { errc <- err })
	check("Producer.SendRetrying", start, <-errc)
}

// TestKafkaSASLReal: the same against Apache Kafka's SASL_SSL listener (kafka.sh with KAFKA_SASL_SSL=1).
func TestKafkaSASLReal(t *testing.T) {
	b := kafkatest.RealSASL(t)
	for _, mech := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			cfg := kafka.Config{Brokers: b.Brokers, Partitions: 2, Security: b.Security(mech),
				Namespace: fmt.Sprintf("t-sasl-%s-%d", strings.ToLower(mech), time.Now().UnixNano())}
			roundTrip(t, cfg)
			bad := cfg
			bad.Security.SASL.PasswordFile = ""
			bad.Security.SASL.Password = secret.New(testPassword)
			bad.Security.SASL.Username = b.Username
			checkAuthFailsUser(t, bad, mech, b.Username)
		})
	}
}

// TestKafkaTLSServerNameEmbedded: --kafka-tls-server-name must match the certificate; insecure-skip-verify
// accepts a certificate without its CA, only when asked.
func TestKafkaTLSServerNameEmbedded(t *testing.T) {
	pki, brokers := secureCluster(t, false)
	sasl := kafka.SASL{Mechanism: kafka.MechanismSCRAMSHA512, Username: "alice", Password: secret.New(testPassword)}
	ok := kafka.Config{Brokers: brokers, Namespace: "sni", Security: kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile, ServerName: "localhost"}, SASL: sasl}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.Client(t, ok).Ping(ctx); err != nil {
		t.Fatalf("server name localhost: %v", err)
	}
	wrong := ok
	wrong.Security.TLS.ServerName = "kafka.example.org"
	if err := kafkatest.Client(t, wrong).Ping(ctx); !kafka.IsAuthError(err) || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("wrong server name: %v, want a TLS authentication error", err)
	}
	noCA := ok
	noCA.Security.TLS = kafka.TLS{Enabled: true}
	if err := kafkatest.Client(t, noCA).Ping(ctx); !kafka.IsAuthError(err) {
		t.Errorf("a certificate of an unknown CA: %v, want a TLS authentication error", err)
	}
	noCA.Security.TLS.InsecureSkipVerify = true
	if err := kafkatest.Client(t, noCA).Ping(ctx); err != nil {
		t.Errorf("insecure-skip-verify: %v", err)
	}
	if d := fmt.Sprint(noCA.Security.Describe()...); !strings.Contains(d, "tls_insecure_skip_verify") || !strings.Contains(d, "SASL_SSL") {
		t.Errorf("Describe = %s", d)
	}
}
