package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/kafka/embedded"
	"github.com/draftflow/draftflow/kafka/kafkatest"
)

var mechanisms = []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512}

// secureRunArgs are `draftflow run` arguments for the bundled sample through brokers with sec's settings.
func secureRunArgs(t *testing.T, brokers []string, sec kafka.Security, ns, out string) []string {
	args := []string{"--input", sampleFile, "--out", out, "--brokers", strings.Join(brokers, ","), "--namespace", ns,
		"--partitions", "2", "--timeout", "3m", "--sim-output-mean", "100", "--max-new-tokens", "512",
		"--kafka-tls-ca-file", sec.TLS.CAFile,
		"--kafka-sasl-mechanism", sec.SASL.Mechanism, "--kafka-sasl-username", sec.SASL.Username}
	if sec.SASL.PasswordFile != "" {
		args = append(args, "--kafka-sasl-password-file", sec.SASL.PasswordFile)
	}
	if sec.TLS.CertFile != "" {
		args = append(args, "--kafka-tls-cert-file", sec.TLS.CertFile, "--kafka-tls-key-file", sec.TLS.KeyFile)
	}
	return args
}

// checkSecureRuns runs the sample through `draftflow run --brokers` with each SASL mechanism over TLS, checks
// every valid id reached the shards, then runs it with a wrong password and checks the command stops at once
// with an error naming the mechanism and user and saying authentication failed, without the password.
func checkSecureRuns(t *testing.T, brokers []string, secure func(mech string) kafka.Security) {
	for _, mech := range mechanisms {
		t.Run(mech, func(t *testing.T) {
			sec := secure(mech)
			out := t.TempDir()
			ns := fmt.Sprintf("t-secure-%s-%d", strings.ToLower(mech), time.Now().UnixNano())
			if err := cmdRun(context.Background(), secureRunArgs(t, brokers, sec, ns, out)); err != nil {
				t.Fatalf("draftflow run over SASL_SSL with %s: %v", mech, err)
			}
			if rows := readShards(t, out); len(rows) == 0 {
				t.Fatal("no rows in the shards")
			}

			wrong := filepath.Join(t.TempDir(), "wrong-password")
			const badPassword = "not-the-password-0123"
			if err := os.WriteFile(wrong, []byte(badPassword+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			sec.SASL.PasswordFile = wrong
			start := time.Now()
			err := cmdRun(context.Background(), secureRunArgs(t, brokers, sec, ns+"-wrong", t.TempDir()))
			took := time.Since(start)
			if err == nil {
				t.Fatal("draftflow run with a wrong password succeeded")
			}
			msg := err.Error()
			t.Logf("wrong password (%s): %v", took.Round(time.Millisecond), msg)
			if !kafka.IsAuthError(err) || !strings.Contains(msg, mech) || !strings.Contains(msg, strconv.Quote(sec.SASL.Username)) ||
				!strings.Contains(msg, "authentication failed") {
				t.Errorf("error %q does not name the mechanism, the user and the authentication failure", msg)
			}
			if strings.Contains(msg, badPassword) {
				t.Errorf("error reveals the password: %s", msg)
			}
			if took > 20*time.Second {
				t.Errorf("the wrong password stopped the run only after %s", took)
			}
		})
	}
}

// TestKafkaSecureRunEmbedded: `draftflow run --brokers` through an embedded broker speaking SASL over TLS.
func TestKafkaSecureRunEmbedded(t *testing.T) {
	pki := kafkatest.NewPKI(t)
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var users []embedded.User
	for _, m := range mechanisms {
		users = append(users, embedded.User{Mechanism: m, Name: "alice", Password: "s3cret-pw"})
	}
	brokers := kafkatest.SecureEmbedded(t, pki, true, users...).Brokers()
	checkSecureRuns(t, brokers, func(mech string) kafka.Security {
		return kafka.Security{TLS: kafka.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile},
			SASL: kafka.SASL{Mechanism: mech, Username: "alice", PasswordFile: pwFile}}
	})
}

// TestKafkaSecureRunReal: the same through Apache Kafka's SASL_SSL listener (make test-integration).
func TestKafkaSecureRunReal(t *testing.T) {
	b := kafkatest.RealSASL(t)
	checkSecureRuns(t, b.Brokers, b.Security)
}

// TestSecurityFlagErrors: unusable settings stop a command at start, naming the setting.
func TestSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-username", "u"}, nil, "unknown SASL mechanism"},
		{[]string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u"}, nil, "needs a password"},
		{[]string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u", "--kafka-sasl-password-file", dir + "/none"}, nil, "password file"},
		{[]string{"--kafka-tls-ca-file", dir + "/none.pem"}, nil, "CA file"},
		{nil, map[string]string{cli.EnvKafkaTLS: "maybe"}, "DRAFTFLOW_KAFKA_TLS"},
		{nil, map[string]string{cli.EnvKafkaSASLMechanism: "PLAIN", cli.EnvKafkaSASLUsername: "u"}, "needs a password"},
		{[]string{"--retention", "soon"}, nil, "retention"},
	}
	for _, c := range cases {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		args := append([]string{"--brokers", "127.0.0.1:1", "--stage", "generate", "--to-earliest"}, c.args...)
		err := cmdReplay(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("replay %v (env %v): %v, want an error containing %q", c.args, c.env, err, c.want)
		}
		for k := range c.env {
			os.Unsetenv(k)
		}
	}
	// The embedded broker speaks plaintext only.
	err := cmdRun(context.Background(), []string{"--input", sampleFile, "--out", dir, "--kafka-tls"})
	if err == nil || !strings.Contains(err.Error(), "need --brokers") {
		t.Errorf("run --kafka-tls without --brokers: %v", err)
	}
}
