package main

import (
	"slices"
	"strings"
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

// parseIDs takes ids separated by commas, spaces or both, and refuses an empty entry instead of
// dropping it (a lost id would shift every target after it).
func TestParseIDs(t *testing.T) {
	tests := []struct {
		in   string
		want []int32
		err  string // in the error; "" when accepted
	}{
		{"1, 2 3,\n40", []int32{1, 2, 3, 40}, ""},
		{"7", []int32{7}, ""},
		{" 1 ,2\n", []int32{1, 2}, ""},
		{"1,x", nil, `"x" is not a token id`},
		{"1,,2", nil, "entry 2 is empty"},
		{"1,2,", nil, "entry 3 is empty"},
		{",1", nil, "entry 1 is empty"},
		{"1, ,2", nil, "entry 2 is empty"},
		{" ", nil, "entry 1 is empty"},
		{"99999999999", nil, "is not a token id"},
	}
	for _, tc := range tests {
		got, err := parseIDs(tc.in)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("parseIDs(%q): -want %v +got %v, %v", tc.in, tc.want, got, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseIDs(%q): -want an error …%s… +got %v, %v", tc.in, tc.err, got, err)
		}
	}
}
