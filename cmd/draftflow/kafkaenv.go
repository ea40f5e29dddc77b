package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/stages/generate"
)

// The environment is read here, in cmd, and nowhere else in draftflow: each variable is the default of a flag
// (a flag given wins over its variable).

// Environment variables of the Kafka settings.
const (
	envBrokers          = "DRAFTFLOW_BROKERS"
	envTLS              = "DRAFTFLOW_KAFKA_TLS"
	envTLSCAFile        = "DRAFTFLOW_KAFKA_TLS_CA_FILE"
	envTLSCertFile      = "DRAFTFLOW_KAFKA_TLS_CERT_FILE"
	envTLSKeyFile       = "DRAFTFLOW_KAFKA_TLS_KEY_FILE"
	envTLSServerName    = "DRAFTFLOW_KAFKA_TLS_SERVER_NAME"
	envTLSInsecure      = "DRAFTFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY"
	envSASLMechanism    = "DRAFTFLOW_KAFKA_SASL_MECHANISM"
	envSASLUsername     = "DRAFTFLOW_KAFKA_SASL_USERNAME"
	envSASLPassword     = "DRAFTFLOW_KAFKA_SASL_PASSWORD"
	envSASLPasswordFile = "DRAFTFLOW_KAFKA_SASL_PASSWORD_FILE"
	// envSGLangAPIKey holds the SGLang API key when no --sglang-api-key-file is given.
	envSGLangAPIKey = "DRAFTFLOW_SGLANG_API_KEY"

	redactedPasswordUsage = "(no flag for the password itself: command lines are visible to every user of the machine)"
)

// parseBrokers splits a comma-separated --brokers value, falling back to DRAFTFLOW_BROKERS when it is empty. It
// returns nil when neither is set.
func parseBrokers(s string) []string {
	if s == "" {
		s = os.Getenv(envBrokers)
	}
	return kafka.ParseBrokers(s)
}

// registerSecurityFlags registers the --kafka-tls* and --kafka-sasl-* flags on fs into s, with defaults from the
// DRAFTFLOW_KAFKA_* environment variables. The password has no flag, only --kafka-sasl-password-file or the
// DRAFTFLOW_KAFKA_SASL_PASSWORD(_FILE) variables. A malformed boolean variable is an error of checkSecurityEnv.
func registerSecurityFlags(fs *flag.FlagSet, s *kafka.Security) {
	securityFromEnv(s)
	fs.BoolVar(&s.TLS.Enabled, "kafka-tls", s.TLS.Enabled, "connect to the brokers over TLS (implied by any --kafka-tls-*-file; env "+envTLS+")")
	fs.StringVar(&s.TLS.CAFile, "kafka-tls-ca-file", s.TLS.CAFile, "PEM CA certificates the brokers' certificates are checked against (default: system roots; env "+envTLSCAFile+")")
	fs.StringVar(&s.TLS.CertFile, "kafka-tls-cert-file", s.TLS.CertFile, "PEM client certificate, for brokers that require one (env "+envTLSCertFile+")")
	fs.StringVar(&s.TLS.KeyFile, "kafka-tls-key-file", s.TLS.KeyFile, "PEM key of --kafka-tls-cert-file (env "+envTLSKeyFile+")")
	fs.StringVar(&s.TLS.ServerName, "kafka-tls-server-name", s.TLS.ServerName, "name the brokers' certificates must carry (default: each broker's host; env "+envTLSServerName+")")
	fs.BoolVar(&s.TLS.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", s.TLS.InsecureSkipVerify, "accept any broker certificate: tests only (env "+envTLSInsecure+")")
	fs.StringVar(&s.SASL.Mechanism, "kafka-sasl-mechanism", s.SASL.Mechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL; env "+envSASLMechanism+")")
	fs.StringVar(&s.SASL.Username, "kafka-sasl-username", s.SASL.Username, "SASL user (env "+envSASLUsername+")")
	fs.StringVar(&s.SASL.PasswordFile, "kafka-sasl-password-file", s.SASL.PasswordFile, "file holding the SASL password (else env "+envSASLPasswordFile+" or "+envSASLPassword+") "+redactedPasswordUsage)
}

// securityFromEnv fills the settings of s still unset from the DRAFTFLOW_KAFKA_* variables.
func securityFromEnv(s *kafka.Security) {
	s.TLS.Enabled = envBool(envTLS, s.TLS.Enabled)
	s.TLS.InsecureSkipVerify = envBool(envTLSInsecure, s.TLS.InsecureSkipVerify)
	envString(&s.TLS.CAFile, envTLSCAFile)
	envString(&s.TLS.CertFile, envTLSCertFile)
	envString(&s.TLS.KeyFile, envTLSKeyFile)
	envString(&s.TLS.ServerName, envTLSServerName)
	envString(&s.SASL.Mechanism, envSASLMechanism)
	envString(&s.SASL.Username, envSASLUsername)
	envString(&s.SASL.PasswordFile, envSASLPasswordFile)
	if v := os.Getenv(envSASLPassword); v != "" && s.SASL.Password.IsZero() {
		s.SASL.Password = secret.New(v)
	}
}

// checkSecurity reports a malformed boolean DRAFTFLOW_KAFKA_* variable, then what s.Validate reports.
func checkSecurity(s kafka.Security) error {
	for _, name := range []string{envTLS, envTLSInsecure} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("kafka: %s=%q is not a boolean (want true or false)", name, v)
			}
		}
	}
	return s.Validate()
}

func envString(dst *string, name string) {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" && *dst == "" {
		*dst = v
	}
}

// envBool reads a boolean variable; a malformed one is reported by checkSecurity.
func envBool(name string, def bool) bool {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
}

// registerGenerateFlags registers generate's flags on fs into cfg, the API key defaulting to
// DRAFTFLOW_SGLANG_API_KEY (--sglang-api-key-file wins over it).
func registerGenerateFlags(fs *flag.FlagSet, cfg *generate.Config) {
	if key := strings.TrimSpace(os.Getenv(envSGLangAPIKey)); key != "" && cfg.APIKey.IsZero() {
		cfg.APIKey = secret.New(key)
	}
	cfg.RegisterFlags(fs)
	if f := fs.Lookup("sglang-api-key-file"); f != nil {
		f.Usage += " (else $" + envSGLangAPIKey + ")"
	}
}
