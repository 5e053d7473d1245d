package hostmem

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		text string
		want int64
		ok   bool
	}{
		{"MemTotal:       131072 kB\nMemFree:  1 kB\nMemAvailable:   65536 kB\n", 64 << 20, true},
		{"MemAvailable: 1 kB", 1024, true},
		{"MemTotal:       131072 kB\n", 0, false},
		{"MemAvailable:   lots kB\n", 0, false},
		{"MemAvailable:   0 kB\n", 0, false},
		{"MemAvailable:   -5 kB\n", 0, false},
		{"MemAvailable:   99999999999999999 kB\n", 0, false},
		{"", 0, false},
	} {
		got, ok := parse(strings.NewReader(tt.text))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parse(%q) = %d, %v; want %d, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

// On a system with /proc/meminfo the reading is a plausible size; elsewhere it is Assumed.
func TestAvailable(t *testing.T) {
	n, ok := Available()
	if !ok {
		if n != Assumed {
			t.Errorf("unread: got %d, want Assumed", n)
		}
		return
	}
	if n < 1<<20 {
		t.Errorf("MemAvailable %d bytes: implausibly small", n)
	}
}
