package kafka

import (
	"context"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franzLogger passes franz-go's log lines (of every client this package makes) to a slog.Logger one level
// down: its info lines (every step of a rebalance) are debug detail beside the Consumer's own "partitions
// assigned" and "partitions revoked", and its errors, which it retries, are warnings; what does not recover
// reaches the caller as an error and is logged there. A line about a request a cancelled context ended (a
// shutdown) is debug detail too.
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
	if level <= kgo.LogLevelWarn && !cancelled(keyvals) {
		l = slog.LevelWarn
	}
	f.l.Log(context.Background(), l, "kafka client: "+msg, keyvals...)
}

// cancelled reports whether a log line's error is a cancelled context.
func cancelled(keyvals []any) bool {
	for _, v := range keyvals {
		if err, ok := v.(error); ok && errors.Is(err, context.Canceled) {
			return true
		}
	}
	return false
}
