package main

import (
	"slices"
	"strings"
	"testing"
)

// parseLayers keeps the order given, and a refusal says what a list may hold.
func TestParseLayers(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string // in the error; "" when accepted
	}{
		{"", nil, ""},
		{"all", []int{0, 1, 2, 3}, ""},
		{"0,2", []int{0, 2}, ""},
		{"3,0", []int{3, 0}, ""},
		{"1-3", []int{1, 2, 3}, ""},
		{" 0 , 2-3", []int{0, 2, 3}, ""},
		{"4", nil, "layer 4 outside 0..3"},
		{"-1", nil, `"-1" is not a layer: want layer numbers from 0 and ranges lo-hi, comma-separated (0,3,5-7), or all`},
		{"last", nil, `"last" is not a layer: want layer numbers from 0`},
		{"ALL", nil, `"ALL" is not a layer: want layer numbers from 0`},
		{"x", nil, "is not a layer"},
		{"3-1", nil, `range "3-1" runs backwards: lo must not exceed hi (write 1-3)`},
		{"1-x", nil, `"1-x" is not a range lo-hi`},
		{"1,1", nil, "appears twice"},
	}
	for _, tc := range tests {
		got, err := parseLayers(tc.in, 4)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("parseLayers(%q): -want %v +got %v, %v", tc.in, tc.want, got, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseLayers(%q): -want an error …%s… +got %v, %v", tc.in, tc.err, got, err)
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
		{"1,-2,3", nil, "-2 is negative: token ids count from 0"}, // before, refused only by the engine, naming "sequence 0"
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
