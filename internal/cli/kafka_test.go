package cli

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/kafka"
)

const testPassword = "hunter2-very-secret"

// TestSecurityFlagsAndEnv: flags win over DRAFTFLOW_KAFKA_* variables, which are the defaults.
func TestSecurityFlagsAndEnv(t *testing.T) {
	t.Setenv(EnvKafkaSASLMechanism, "SCRAM-SHA-256")
	t.Setenv(EnvKafkaSASLUsername, "from-env")
	t.Setenv(EnvKafkaSASLPassword, testPassword)
	t.Setenv(EnvKafkaTLSCAFile, "/env/ca.pem")
	var s kafka.Security
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	BindKafkaSecurityFromEnv(fs, &s, os.Getenv)
	if err := fs.Parse([]string{"--kafka-sasl-username", "from-flag", "--kafka-tls-server-name", "kafka.internal"}); err != nil {
		t.Fatal(err)
	}
	if s.SASL.Mechanism != "SCRAM-SHA-256" || s.SASL.Username != "from-flag" || s.SASL.Password.Reveal() != testPassword ||
		s.TLS.CAFile != "/env/ca.pem" || s.TLS.ServerName != "kafka.internal" {
		t.Errorf("got %+v", s)
	}
	if fs.Lookup("kafka-sasl-password") != nil {
		t.Error("a password flag would put the password on the command line")
	}
}

// TestSecurityEnvBooleans: a malformed boolean variable is an error naming it; a well-formed one is the flag's
// default.
func TestSecurityEnvBooleans(t *testing.T) {
	t.Setenv(EnvKafkaTLS, "maybe")
	if err := CheckKafkaSecurity(kafka.Security{}, os.Getenv); err == nil || !strings.Contains(err.Error(), EnvKafkaTLS+`="maybe" is not a boolean`) {
		t.Errorf("CheckKafkaSecurity with %s=maybe: %v", EnvKafkaTLS, err)
	}
	t.Setenv(EnvKafkaTLS, "true")
	var s kafka.Security
	BindKafkaSecurityFromEnv(flag.NewFlagSet("t", flag.ContinueOnError), &s, os.Getenv)
	if !s.TLS.Enabled {
		t.Errorf("%s=true did not turn TLS on", EnvKafkaTLS)
	}
}
