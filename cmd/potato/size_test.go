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
