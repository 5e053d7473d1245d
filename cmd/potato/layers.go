package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay"
)

// parseLayers reads a layer list flag: "all", or comma-separated 0-indexed layers and ranges ("0,3,8-11").
// An empty string is no layers. A layer may be given once (replay.CheckLayers, the service's rule too):
// "1,1" and "0-7,3" are refused, since a repeated layer would repeat its rows. The order given is kept:
// the results, and the tables' rows, list the layers as the flag did ("5,0" gives layer 5's first).
func parseLayers(s string, layers int) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if s == "all" {
		out := make([]int, layers)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("layer list %q: %q is not a layer: want layer numbers from 0 and ranges lo-hi, comma-separated (0,3,5-7), or all (the model's layers are 0..%d)", s, part, layers-1)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < 0 {
				return nil, fmt.Errorf("layer list %q: %q is not a range lo-hi: want two layer numbers from 0 (5-7)", s, part)
			}
			if b < a {
				return nil, fmt.Errorf("layer list %q: range %q runs backwards: lo must not exceed hi (write %d-%d)", s, part, b, a)
			}
		}
		for l := a; l <= b; l++ {
			if l >= layers {
				return nil, fmt.Errorf("layer list %q: layer %d outside 0..%d (layers are 0-indexed)", s, l, layers-1)
			}
			out = append(out, l)
		}
	}
	if err := replay.CheckLayers(out, layers); err != nil {
		return nil, fmt.Errorf("layer list %q: %w", s, err)
	}
	return out, nil
}

// parseIDs reads a list of token ids separated by commas, spaces or both ("1, 2 3,\n40"). An empty
// entry between commas, or before or after one ("1,,2", "1,2,", ",1"), is refused rather than dropped:
// it is most likely an id lost in editing, and a sequence silently one token short shifts every target.
func parseIDs(s string) ([]int32, error) {
	var out []int32
	for i, part := range strings.Split(s, ",") {
		fields := strings.Fields(part)
		if len(fields) == 0 {
			return nil, fmt.Errorf("token list: entry %d is empty (a comma with no id on one side)", i+1)
		}
		for _, f := range fields {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("token list: %q is not a token id", f)
			}
			if v < 0 {
				return nil, fmt.Errorf("token list: %d is negative: token ids count from 0", v)
			}
			out = append(out, int32(v))
		}
	}
	return out, nil
}
