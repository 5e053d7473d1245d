package model

import (
	"context"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

type mapSource map[string][]byte

func (m mapSource) Read(_ context.Context, s checkpoint.Spec) ([]byte, error) { return m[s.Name], nil }

func TestLoaderRefusesNonFinite(t *testing.T) {
	tests := []struct {
		name string
		dt   checkpoint.DType
		raw  []byte
		bad  int
	}{
		{"bf16 finite", checkpoint.BF16, []byte{0x80, 0x3f, 0x00, 0xc0}, -1},
		{"bf16 inf", checkpoint.BF16, []byte{0x80, 0x3f, 0x80, 0x7f}, 1},
		{"bf16 nan", checkpoint.BF16, []byte{0xc0, 0xff, 0x80, 0x3f}, 0},
		{"f32 finite", checkpoint.F32, []byte{0, 0, 0x80, 0x3f}, -1},
		{"f32 nan", checkpoint.F32, []byte{0, 0, 0x80, 0x3f, 1, 0, 0x80, 0x7f}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := checkpoint.Spec{Name: "w", DType: tc.dt, Shape: []int64{int64(len(tc.raw)) / tc.dt.Size()}}
			ld := &loader{ctx: context.Background(), src: mapSource{"w": tc.raw}}
			ld.bytes(s)
			if (ld.err != nil) != (tc.bad >= 0) {
				t.Fatalf("err = %v, want refusal %v", ld.err, tc.bad >= 0)
			}
			if ld.err != nil && !strings.Contains(ld.err.Error(), "tensor w: element") {
				t.Errorf("error %q does not name the tensor and element", ld.err)
			}
		})
	}
}
