package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franzLogger passes franz-go's log lines (the consumer group's) to a slog.Logger one level down: its info
// lines (every step of a rebalance) are debug detail beside the Consumer's own "partitions assigned" and
// "partitions revoked", and its errors, which it retries, are warnings; what does not recover reaches the
// Consumer as an error and is logged there.
type franzLogger struct{ l *slog.Logger }

// Level enables franz-go's debug lines only where the slog.Logger shows debug.
func (f franzLogger) Level() kgo.LogLevel {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

// Log logs msg with its key-value pairs.
func (f franzLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelDebug
	if level <= kgo.LogLevelWarn {
		l = slog.LevelWarn
	}
	f.l.Log(context.Background(), l, "kafka client: "+msg, keyvals...)
}
