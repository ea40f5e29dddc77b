package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/secret"
)

// The environment variables of the Kafka security settings (--kafka-tls*, --kafka-sasl-*), which every command
// that talks to a secured cluster reads: draftflow's and draftflow-bench's.
const (
	EnvKafkaTLS              = "DRAFTFLOW_KAFKA_TLS"
	EnvKafkaTLSCAFile        = "DRAFTFLOW_KAFKA_TLS_CA_FILE"
	EnvKafkaTLSCertFile      = "DRAFTFLOW_KAFKA_TLS_CERT_FILE"
	EnvKafkaTLSKeyFile       = "DRAFTFLOW_KAFKA_TLS_KEY_FILE"
	EnvKafkaTLSServerName    = "DRAFTFLOW_KAFKA_TLS_SERVER_NAME"
	EnvKafkaTLSInsecure      = "DRAFTFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY"
	EnvKafkaSASLMechanism    = "DRAFTFLOW_KAFKA_SASL_MECHANISM"
	EnvKafkaSASLUsername     = "DRAFTFLOW_KAFKA_SASL_USERNAME"
	EnvKafkaSASLPasswordFile = "DRAFTFLOW_KAFKA_SASL_PASSWORD_FILE"
	// EnvKafkaSASLPassword holds the SASL password itself: it has no key and no flag.
	EnvKafkaSASLPassword = "DRAFTFLOW_KAFKA_SASL_PASSWORD"
)

// KafkaSecurityEnv returns the variables of the Kafka security settings by job file key (a new map each call),
// for Sources.Env.
func KafkaSecurityEnv() map[string]string {
	return map[string]string{
		"kafka-tls":                      EnvKafkaTLS,
		"kafka-tls-ca-file":              EnvKafkaTLSCAFile,
		"kafka-tls-cert-file":            EnvKafkaTLSCertFile,
		"kafka-tls-key-file":             EnvKafkaTLSKeyFile,
		"kafka-tls-server-name":          EnvKafkaTLSServerName,
		"kafka-tls-insecure-skip-verify": EnvKafkaTLSInsecure,
		"kafka-sasl-mechanism":           EnvKafkaSASLMechanism,
		"kafka-sasl-username":            EnvKafkaSASLUsername,
		"kafka-sasl-password-file":       EnvKafkaSASLPasswordFile,
	}
}

const passwordUsage = "(no flag for the password itself: command lines are visible to every user of the machine)"

// BindKafkaSecurity binds the --kafka-tls* and --kafka-sasl-* flags on fs into s, s's values their defaults. The
// password has no flag, only --kafka-sasl-password-file or the DRAFTFLOW_KAFKA_SASL_PASSWORD(_FILE) variables.
func BindKafkaSecurity(fs *flag.FlagSet, s *kafka.Security) {
	fs.BoolVar(&s.TLS.Enabled, "kafka-tls", s.TLS.Enabled, "connect to the brokers over TLS (implied by any --kafka-tls-*-file; env "+EnvKafkaTLS+")")
	fs.StringVar(&s.TLS.CAFile, "kafka-tls-ca-file", s.TLS.CAFile, "PEM CA certificates the brokers' certificates are checked against (default: system roots; env "+EnvKafkaTLSCAFile+")")
	fs.StringVar(&s.TLS.CertFile, "kafka-tls-cert-file", s.TLS.CertFile, "PEM client certificate, for brokers that require one (env "+EnvKafkaTLSCertFile+")")
	fs.StringVar(&s.TLS.KeyFile, "kafka-tls-key-file", s.TLS.KeyFile, "PEM key of --kafka-tls-cert-file (env "+EnvKafkaTLSKeyFile+")")
	fs.StringVar(&s.TLS.ServerName, "kafka-tls-server-name", s.TLS.ServerName, "name the brokers' certificates must carry (default: each broker's host; env "+EnvKafkaTLSServerName+")")
	fs.BoolVar(&s.TLS.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", s.TLS.InsecureSkipVerify, "accept any broker certificate: tests only (env "+EnvKafkaTLSInsecure+")")
	fs.StringVar(&s.SASL.Mechanism, "kafka-sasl-mechanism", s.SASL.Mechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL; env "+EnvKafkaSASLMechanism+")")
	fs.StringVar(&s.SASL.Username, "kafka-sasl-username", s.SASL.Username, "SASL user (env "+EnvKafkaSASLUsername+")")
	fs.StringVar(&s.SASL.PasswordFile, "kafka-sasl-password-file", s.SASL.PasswordFile, "file holding the SASL password (else env "+EnvKafkaSASLPasswordFile+" or "+EnvKafkaSASLPassword+") "+passwordUsage)
}

// BindKafkaSecurityFromEnv is BindKafkaSecurity for a command that reads no job file (Table.Parse): the
// variables getenv gives (the command passes os.Getenv) are the flags' defaults, and DRAFTFLOW_KAFKA_SASL_PASSWORD
// the password. A malformed boolean variable keeps the default; CheckKafkaSecurity reports it.
func BindKafkaSecurityFromEnv(fs *flag.FlagSet, s *kafka.Security, getenv func(string) string) {
	env := KafkaSecurityEnv()
	scratch := flag.NewFlagSet("env", flag.ContinueOnError)
	BindKafkaSecurity(scratch, s)
	scratch.VisitAll(func(f *flag.Flag) {
		if v := strings.TrimSpace(getenv(env[f.Name])); v != "" && env[f.Name] != "" {
			_ = f.Value.Set(v) // a malformed boolean keeps the default; CheckKafkaSecurity reports it
		}
	})
	if v := getenv(EnvKafkaSASLPassword); v != "" && s.SASL.Password.IsZero() {
		s.SASL.Password = secret.New(v)
	}
	BindKafkaSecurity(fs, s)
}

// CheckKafkaSecurity reports a malformed boolean DRAFTFLOW_KAFKA_* variable (read with getenv), then what
// s.Validate reports.
func CheckKafkaSecurity(s kafka.Security, getenv func(string) string) error {
	for _, name := range []string{EnvKafkaTLS, EnvKafkaTLSInsecure} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("kafka: %s=%q is not a boolean (want true or false)", name, v)
			}
		}
	}
	return s.Validate()
}
