package job

import (
	"fmt"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
)

// progressLine is the line a job prints after each wave, for example
//
//	job: wave 3 of 12 (part-00002): 250 of 1,000 conversations, 51,234 of 204,800 tokens (25.0%); 1,234 tokens/s; 17.2 MB read this pass; ETA 2m3s
//
// Tokens per second and the ETA count this run's waves only (a resumed job's earlier parts ran at
// another time), from the first wave's start to now, part writes included.
func progressLine(w, waves int, p Part, s Summary) string {
	rate := 0.0
	if s.Seconds > 0 {
		rate = float64(s.TokensRun) / s.Seconds
	}
	eta := "unknown"
	if rate > 0 {
		eta = (time.Duration(float64(s.Tokens-s.TokensDone) / rate * float64(time.Second))).Round(time.Second).String()
	}
	pct := 100.0
	if s.Tokens > 0 {
		pct = 100 * float64(s.TokensDone) / float64(s.Tokens)
	}
	return fmt.Sprintf("job: wave %d of %d (%s): %s of %s conversations, %s of %s tokens (%.1f%%); %s tokens/s; %s read this pass; ETA %s",
		w, waves, p.Name, numtext.Commas(int64(s.Done)), numtext.Commas(int64(s.Conversations)), numtext.Commas(s.TokensDone), numtext.Commas(s.Tokens), pct,
		numtext.Commas(int64(rate+0.5)), numtext.Bytes(p.BytesRead), eta)
}
