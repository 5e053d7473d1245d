package numtext

import (
	"math"
	"testing"
)

func TestCommas(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {-1000, "-1,000"}, {-12, "-12"},
		{1048576, "1,048,576"}, {1560860324864, "1,560,860,324,864"},
		{math.MaxInt64, "9,223,372,036,854,775,807"}, {math.MinInt64, "-9,223,372,036,854,775,808"},
	} {
		if got := Commas(c.n); got != c.want {
			t.Errorf("Commas(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 tokens"}, {1, "1 token"}, {2, "2 tokens"}, {-1, "-1 tokens"}, {4096, "4,096 tokens"},
	} {
		if got := Count(c.n, "token"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {999, "999 B"}, {1000, "1.0 kB"}, {54400, "54.4 kB"}, {11e9, "11.0 GB"},
		{1560860324864, "1.6 TB"}, {-2500, "-2.5 kB"}, {math.MaxInt64, "9223.4 PB"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
