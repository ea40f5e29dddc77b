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

// The environment is read here, in cmd, and nowhere else in draftflow. A variable of envVars sets its key, over
// the job file and under the flag (cli.Load); the two credentials have no key and no flag, only a variable or a
// file a setting names.

// Environment variables of settings.
const (
	envBrokers          = "DRAFTFLOW_BROKERS"
	envNamespace        = "DRAFTFLOW_NAMESPACE"
	envRetention        = "DRAFTFLOW_RETENTION"
	envTLS              = "DRAFTFLOW_KAFKA_TLS"
	envTLSCAFile        = "DRAFTFLOW_KAFKA_TLS_CA_FILE"
	envTLSCertFile      = "DRAFTFLOW_KAFKA_TLS_CERT_FILE"
	envTLSKeyFile       = "DRAFTFLOW_KAFKA_TLS_KEY_FILE"
	envTLSServerName    = "DRAFTFLOW_KAFKA_TLS_SERVER_NAME"
	envTLSInsecure      = "DRAFTFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY"
	envSASLMechanism    = "DRAFTFLOW_KAFKA_SASL_MECHANISM"
	envSASLUsername     = "DRAFTFLOW_KAFKA_SASL_USERNAME"
	envSASLPasswordFile = "DRAFTFLOW_KAFKA_SASL_PASSWORD_FILE"
	// envSASLPassword holds the SASL password itself: it has no key and no flag.
	envSASLPassword = "DRAFTFLOW_KAFKA_SASL_PASSWORD"
	// envSGLangAPIKey holds the SGLang API key when no --sglang-api-key-file is given: it has no key and no flag.
	envSGLangAPIKey = "DRAFTFLOW_SGLANG_API_KEY"

	redactedPasswordUsage = "(no flag for the password itself: command lines are visible to every user of the machine)"
)

// envVars are the variables of settings, by job file key: each command that has the key reads it.
var envVars = map[string]string{
	"brokers":                        envBrokers,
	"namespace":                      envNamespace,
	"retention":                      envRetention,
	"kafka-tls":                      envTLS,
	"kafka-tls-ca-file":              envTLSCAFile,
	"kafka-tls-cert-file":            envTLSCertFile,
	"kafka-tls-key-file":             envTLSKeyFile,
	"kafka-tls-server-name":          envTLSServerName,
	"kafka-tls-insecure-skip-verify": envTLSInsecure,
	"kafka-sasl-mechanism":           envSASLMechanism,
	"kafka-sasl-username":            envSASLUsername,
	"kafka-sasl-password-file":       envSASLPasswordFile,
}

// bindSecurityFlags binds the --kafka-tls* and --kafka-sasl-* flags on fs into s, s's values their defaults. The
// password has no flag, only --kafka-sasl-password-file or the DRAFTFLOW_KAFKA_SASL_PASSWORD(_FILE) variables.
func bindSecurityFlags(fs *flag.FlagSet, s *kafka.Security) {
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

// registerSecurityFlags is bindSecurityFlags for a command that reads no job file (cli.Table.Parse): the
// DRAFTFLOW_KAFKA_* variables are the flags' defaults. A malformed boolean variable is an error of checkSecurity.
func registerSecurityFlags(fs *flag.FlagSet, s *kafka.Security) {
	securityFromEnv(s)
	bindSecurityFlags(fs, s)
}

// securityFromEnv sets the settings of s that a DRAFTFLOW_KAFKA_* variable gives, and the password.
func securityFromEnv(s *kafka.Security) {
	scratch := flag.NewFlagSet("env", flag.ContinueOnError)
	bindSecurityFlags(scratch, s)
	scratch.VisitAll(func(f *flag.Flag) {
		if v := strings.TrimSpace(os.Getenv(envVars[f.Name])); v != "" && envVars[f.Name] != "" {
			_ = f.Value.Set(v) // a malformed boolean keeps the default; checkSecurity reports it
		}
	})
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
