package cmd

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

func TestACleanStopIsNotAnError(t *testing.T) {
	var lines []string
	logger := QuietStop(funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{}))
	logger.WithName("plugin").Error(nil, "While terminating server")
	logger.Error(errors.New("listen failed"), "While terminating server")
	logger.WithValues("k", "v").Error(nil, "another message")
	want := []string{
		`plugin "level"=0 "msg"="Server stopped"`,
		` "msg"="While terminating server" "error"="listen failed"`,
		` "msg"="another message" "error"=null "k"="v"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%q", lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, lines[i], want[i])
		}
	}
	if QuietStop(logr.Discard()).GetSink() != nil {
		t.Error("a discarding logger was wrapped")
	}
}
