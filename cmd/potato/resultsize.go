package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/model"
)

// resultBytes estimates the host memory a replay's results hold until they are written (and the engine's
// captures of the wave, which they share): per token the model's statistics and each lens layer's (the
// struct and its top-k), each hidden layer's vector (float32), each MoE layer's routing when asked (ids
// and weights), each mix's weights when asked (up to the blocks so far plus the running sum, 2 sites a
// layer and the output mix). Slice headers included, rounded up; the estimate, not an exact count.
func resultBytes(req replay.Request, plan *model.Plan, hidden int) int64 {
	var tokens int64
	for _, s := range req.Sequences {
		tokens += int64(len(s.Tokens))
	}
	o := req.Options
	stats := int64(12 + 2*24 + o.TopK*8)                                               // logprob, rank, entropy; two slice headers; ids and logprobs
	perToken := stats*int64(1+len(o.Lens)) + int64(len(o.Hidden))*int64(hidden)*4 + 64 // ids, pieces, targets
	if o.Router {
		moe := 0
		for _, l := range plan.Layers {
			if l.FFN == model.MoE {
				moe++
			}
		}
		perToken += int64(moe) * int64(plan.Config.NumExpertsPerToken) * 8
	}
	if o.AttnRes {
		perToken += int64(len(plan.Layers)) * 3 * int64(plan.MaxBlocks()+1) * 4
	}
	return tokens * perToken
}

// defaultResultLimit is half the memory available when the command starts (MemAvailable of
// /proc/meminfo), or 16 GB where that cannot be read: results past it would push the process toward the
// kernel's out-of-memory killer or Go's fatal out-of-memory error, neither of which says which flag to
// change.
func defaultResultLimit() (int64, string) {
	f, err := os.Open("/proc/meminfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err == nil && kb > 0 {
					return kb * 1024 / 2, "half the memory available"
				}
			}
		}
	}
	return 16e9, "the default where the memory available is unknown"
}

// checkResultBytes refuses a request whose results would pass limit (0: defaultResultLimit).
func checkResultBytes(req replay.Request, plan *model.Plan, hidden int, limit int64) error {
	why := "--max-result-bytes"
	if limit == 0 {
		var what string
		limit, what = defaultResultLimit()
		why += "; " + what
	}
	if need := resultBytes(req, plan, hidden); need > limit {
		return fmt.Errorf("replay: the results would hold about %s in memory (%d hidden and %d lens layers, top-k %d, over every token): the limit is %s (%s): ask for fewer layers, or split the input",
			humanBytes(need), len(req.Options.Hidden), len(req.Options.Lens), req.Options.TopK, humanBytes(limit), why)
	}
	return nil
}

// humanBytes writes n with a decimal unit: "54.4 kB", "11.0 GB".
func humanBytes(n int64) string {
	v, units := float64(n), []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for ; v >= 1000 && i < len(units)-1; i++ {
		v /= 1000
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
