package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/velvetrope/velvetrope/internal/logx"
)

// redisLog routes go-redis's own log lines (a failed dial, once per
// attempt and per caller) into the process log at most once per 10 s:
// while Redis is down they would otherwise flood it; the breaker and the
// store error metrics say the rest.
type redisLog struct{ l *logx.Limited }

func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	r.l.Warn("redis client", "detail", fmt.Sprintf(format, v...))
}

// quietRedis installs redisLog for the process (go-redis has one logger
// per process).
func quietRedis(logger *slog.Logger) {
	redis.SetLogger(redisLog{logx.New(logger, 10*time.Second)})
}
