package server

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// The wire package's list of tables is the tables package's.
func TestTableNamesAgree(t *testing.T) {
	if !slices.Equal(api.Tables, tables.TableNames) {
		t.Fatalf("api.Tables %v, tables.TableNames %v", api.Tables, tables.TableNames)
	}
}

func TestHealthInfoList(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	var h api.Health
	if code, body := ts.do(t, "GET", api.PathHealth, ""); code != http.StatusOK || json.Unmarshal(body, &h) != nil {
		t.Fatalf("health: %d %s", code, body)
	}
	if h.Status != "ok" || h.PID != os.Getpid() || h.Version != replay.Version {
		t.Errorf("health: %+v", h)
	}
	var info api.Info
	code, body := ts.do(t, "GET", api.PathInfo, "")
	if code != http.StatusOK || json.Unmarshal(body, &info) != nil {
		t.Fatalf("info: %d %s", code, body)
	}
	if info.ModelDir != modelDir || info.Layers != 8 || info.Vocab != 3328 || info.Hidden != 128 ||
		len(info.ConfigSHA256) != 64 || info.Backend != "cpu" || info.Precision != "bf16" || !info.Tokenizer ||
		info.Limits != DefaultLimits || info.EngineVersion != replay.Version {
		t.Errorf("info: %+v", info)
	}
	kinds := ""
	for _, k := range info.LayerKinds {
		kinds += k.Attn[:1] + k.FFN[:1] + " "
	}
	if kinds != "kd km km mm km km mm mm " {
		t.Errorf("layer kinds (attn, ffn initials): %s", kinds)
	}
	a := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1}}}, Label: "first"}).ID
	b := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{2}}}, Label: "second"}).ID
	ts.waitState(t, b, api.StateDone)
	var list []api.JobStatus
	code, body = ts.do(t, "GET", api.PathJobs, "")
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list) != 2 ||
		list[0].ID != a || list[1].ID != b || list[0].Label != "first" {
		t.Errorf("list: %d %s", code, body)
	}
}
