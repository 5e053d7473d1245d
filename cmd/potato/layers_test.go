package main

import (
	"slices"
	"testing"
)

func TestParseLayers(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"all", []int{0, 1, 2, 3}, false},
		{"0,2", []int{0, 2}, false},
		{"1-3", []int{1, 2, 3}, false},
		{" 0 , 2-3", []int{0, 2, 3}, false},
		{"4", nil, true},
		{"-1", nil, true},
		{"3-1", nil, true},
		{"x", nil, true},
	}
	for _, tc := range tests {
		got, err := parseLayers(tc.in, 4)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseLayers(%q): err = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseLayers(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseIDs(t *testing.T) {
	got, err := parseIDs("1, 2 3,\n40")
	if err != nil || !slices.Equal(got, []int32{1, 2, 3, 40}) {
		t.Errorf("parseIDs = %v, %v", got, err)
	}
	if _, err := parseIDs("1,x"); err == nil {
		t.Error("parseIDs accepted a non-number")
	}
}
