package cmd

import "github.com/go-logr/logr"

// QuietStop wraps the logger given to cnpg-i-machinery's server: a clean
// stop is logged as such, not as an error. Machinery v0.4.2 logs "While
// terminating server" with a nil error and a stack trace whenever its
// server stops (grpc.Server.Serve returns nil after Stop, and it expects
// net.ErrClosed); every other message passes unchanged.
func QuietStop(logger logr.Logger) logr.Logger {
	if logger.GetSink() == nil {
		return logger
	}
	return logr.New(quietStop{logger.GetSink()})
}

type quietStop struct {
	logr.LogSink
}

// Init accounts for this wrapper's frame in the caller reported.
func (s quietStop) Init(info logr.RuntimeInfo) {
	s.LogSink.Init(logr.RuntimeInfo{CallDepth: info.CallDepth + 1})
}

func (s quietStop) Error(err error, msg string, keysAndValues ...any) {
	if err == nil && msg == "While terminating server" {
		s.LogSink.Info(0, "Server stopped", keysAndValues...)
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s quietStop) WithValues(keysAndValues ...any) logr.LogSink {
	return quietStop{s.LogSink.WithValues(keysAndValues...)}
}

func (s quietStop) WithName(name string) logr.LogSink {
	return quietStop{s.LogSink.WithName(name)}
}

func (s quietStop) WithCallDepth(depth int) logr.LogSink {
	if sink, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return quietStop{sink.WithCallDepth(depth)}
	}
	return s
}
