package job

import (
	"fmt"
	"strconv"
	"time"
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
		w, waves, p.Name, commas(int64(s.Done)), commas(int64(s.Conversations)), commas(s.TokensDone), commas(s.Tokens), pct,
		commas(int64(rate+0.5)), bytesText(p.BytesRead), eta)
}

// commas writes n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// bytesText writes a byte count in MB, or GB from a gigabyte.
func bytesText(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// count writes n and the noun, plural unless n is 1: "1 wave", "3 waves".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return commas(int64(n)) + " " + noun + "s"
}
