package main

import (
	"flag"
	"os"
	"strings"

	"github.com/draftflow/draftflow/internal/cli"
	"github.com/draftflow/draftflow/secret"
	"github.com/draftflow/draftflow/stages/generate"
)

// The environment is read here, in cmd, and nowhere else in draftflow. A variable of envVars sets its key, over
// the job file and under the flag (cli.Load); the two credentials have no key and no flag, only a variable or a
// file a setting names.

// Environment variables of settings (the Kafka security settings' are cli.KafkaSecurityEnv).
const (
	envBrokers   = "DRAFTFLOW_BROKERS"
	envNamespace = "DRAFTFLOW_NAMESPACE"
	envRetention = "DRAFTFLOW_RETENTION"
	// envSGLangAPIKey holds the SGLang API key when no --sglang-api-key-file is given: it has no key and no flag.
	envSGLangAPIKey = "DRAFTFLOW_SGLANG_API_KEY"
)

// envVars are the variables of settings, by job file key: each command that has the key reads it.
var envVars = func() map[string]string {
	m := cli.KafkaSecurityEnv()
	m["brokers"], m["namespace"], m["retention"] = envBrokers, envNamespace, envRetention
	return m
}()

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
