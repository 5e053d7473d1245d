package server

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// TestCheckKeys: keys given twice and keys that match a field only when case is ignored are refused,
// with their path; a conversation's own keys (a raw value parsed by package datasets) are not looked at.
func TestCheckKeys(t *testing.T) {
	for _, tc := range []struct {
		body, want string // want "": accepted
	}{
		{`{"inputs":[{"tokens":[1,2]},{"text":"hi"}],"options":{"top_k":3,"lens":[0,1]},"label":"x"}`, ""},
		{`{"inputs":[{"conversation":{"Messages":[{"role":"user","Content":"a"}],"messages":[]}}]}`, ""},
		{`{"options":{"top_k":3,"TOP_K":4}}`, `options.TOP_K: keys are case-sensitive: did you mean "top_k"?`},
		{`{"Inputs":[]}`, `Inputs: keys are case-sensitive: did you mean "inputs"?`},
		{`{"options":{"top_k":3,"top_k":4}}`, "options.top_k: the key is given twice"},
		{`{"inputs":[{"tokens":[1]},{"text":"a","text":"b"}]}`, "inputs[1].text: the key is given twice"},
		{`{"label":"a","label":"b"}`, "label: the key is given twice"},
		{`{"surprise":{"a":1,"a":2}}`, "surprise.a: the key is given twice"},
	} {
		err := checkKeys([]byte(tc.body), reflect.TypeFor[api.Request]())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", tc.body, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v; want %q", tc.body, err, tc.want)
		}
	}
}

// TestServerRefusesAmbiguousKeys: the service answers such a request 400, naming the key.
func TestServerRefusesAmbiguousKeys(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	code, body := ts.do(t, http.MethodPost, api.PathJobs, `{"inputs":[{"tokens":[5,6,7]}],"options":{"Top_K":2}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `did you mean \"top_k\"`) {
		t.Errorf("got %d %s; want 400 naming top_k", code, body)
	}
}
