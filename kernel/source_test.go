package kernel

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// A notebook that finds a background engine another checkout built is told so, since its results are
// that checkout's code: the state file is one per user cache, not per checkout. An engine of this
// checkout, or one whose state names none (an older engine, a -trimpath build), says nothing.
func TestConnectSaysWhichCheckoutBuiltTheEngine(t *testing.T) {
	mine := thisCheckout(t)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Health{Status: "ok", PID: os.Getpid()})
	}))
	defer engine.Close()
	other := t.TempDir()
	for _, tt := range []struct {
		name, source string
		warns        bool
	}{
		{"another checkout", other, true},
		{"this checkout", mine, false},
		{"none recorded", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			t.Setenv(EnvAddr, "")
			dir, err := stateDir()
			if err != nil {
				t.Fatal(err)
			}
			writeState(t, dir, api.State{Addr: engine.URL, PID: os.Getpid(), Source: tt.source})
			var said bytes.Buffer
			c, err := Connect(WithProgress(&said), WithoutStart())
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			got := said.String()
			if tt.warns != (got != "") || (tt.warns && (!strings.Contains(got, other) || !strings.Contains(got, mine) ||
				!strings.Contains(got, "kernel.Shutdown()"))) {
				t.Errorf("Connect said %q", got)
			}
		})
	}
}

// thisCheckout is api.SourceRoot, which must name this checkout in the tests' build.
func thisCheckout(t *testing.T) string {
	root := api.SourceRoot()
	if _, err := os.Stat(filepath.Join(root, "kernel", "api", "source.go")); err != nil {
		t.Fatalf("api.SourceRoot() = %q, not this checkout: %v", root, err)
	}
	return root
}
