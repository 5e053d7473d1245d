package main

import "testing"

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"4096", 4096, false},
		{"40GB", 40e9, false},
		{"40 gb", 40e9, false},
		{"1.5TiB", 3 << 39, false},
		{"512MiB", 512 << 20, false},
		{"7b", 7, false},
		{"", 0, true},
		{"-1GB", 0, true},
		{"lots", 0, true},
		{"9e30", 0, true},
		{"1.1GB", 1.1e9, false},
		{"1.5KB", 1500, false},
		{"2.5e3", 2500, false},
		{"nan", 0, true}, // ParseFloat reads NaN and Inf: they were taken as a size
		{"NaN", 0, true},
		{"inf", 0, true},
		{"+Inf GB", 0, true},
		{"0.5", 0, true}, // a fraction of a byte truncated to 0, the flag's default
		{"1e-3", 0, true},
		{"0.0001KB", 0, true},
		{"1.0000001", 0, true},
		{"0.1GB", 1e8, false},
		{"1000000000000.5", 0, true},
	} {
		var s byteSize
		err := s.Set(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("Set(%q): error %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad && int64(s) != tc.want {
			t.Errorf("Set(%q) = %d, want %d", tc.in, int64(s), tc.want)
		}
	}
}
