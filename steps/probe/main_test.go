package probe

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(tlsServerEnv); dir != "" {
		serveChainProcess(dir)
		return
	}
	os.Exit(m.Run())
}
