package checkpoint

import (
	"errors"
	"strings"
	"testing"
)

func openSmall(t *testing.T, opts ...Option) *Dir {
	t.Helper()
	dir := t.TempDir()
	writeCheckpoint(t, dir, smallModel())
	d, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestCheck(t *testing.T) {
	d := openSmall(t)
	const p = "language_model.model."
	all := specsOf(smallModel())
	without := func(name string) []Spec {
		var out []Spec
		for _, s := range all {
			if s.Name != name {
				out = append(out, s)
			}
		}
		return out
	}
	replace := func(s Spec) []Spec { return append(without(s.Name), s) }
	tests := []struct {
		name string
		skip []string
		spec []Spec
		want []string // lines of the error after the summary; nil: no error
		sum  string
	}{
		{name: "exact", spec: all},
		{name: "skipped prefix", skip: []string{"vision_tower.", "mm_projector."}, spec: without("vision_tower.patch_embed.weight")},
		{name: "missing", spec: append(all, Spec{Name: p + "layers.3.self_attn.kv_a_proj_with_mqa.weight", DType: BF16, Shape: []int64{576, 7168}}),
			sum:  "0 wrong, 0 unused",
			want: []string{"tensor " + p + "layers.3.self_attn.kv_a_proj_with_mqa.weight: missing, want [576 7168] BF16"}},
		{name: "wrong shape", spec: replace(Spec{Name: p + "norm.weight", DType: BF16, Shape: []int64{7}}),
			want: []string{"tensor " + p + "norm.weight: want [7] BF16, got [8] BF16"}},
		{name: "wrong dtype", spec: replace(Spec{Name: p + "layers.0.self_attn.A_log", DType: BF16, Shape: []int64{4}}),
			want: []string{"tensor " + p + "layers.0.self_attn.A_log: want [4] BF16, got [4] F32"}},
		{name: "unused", spec: without(p + "norm.weight"),
			want: []string{"tensor " + p + "norm.weight: unused, [8] BF16 in model-00001-of-00002.safetensors"}},
		{name: "duplicated spec", spec: append(all, all[0]),
			want: []string{"spec " + all[0].Name + ": listed more than once"}},
		{name: "everything at once", spec: append(replace(Spec{Name: p + "norm.weight", DType: F32, Shape: []int64{8}}),
			Spec{Name: "a.weight", DType: U8, Shape: []int64{1}}, Spec{Name: "b.weight", DType: U8, Shape: []int64{1}}),
			skip: []string{"language_model.lm_head"},
			sum:  "2 missing, 1 wrong, 0 unused",
			want: []string{"tensor a.weight: missing, want [1] U8", "tensor b.weight: missing, want [1] U8",
				"tensor " + p + "norm.weight: want [8] F32, got [8] BF16"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.Check(tc.spec, tc.skip...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
				t.Fatalf("Check returned %v, want a *MismatchError matching ErrMismatch", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if !strings.Contains(lines[0], tc.sum) {
				t.Errorf("summary line %q does not contain %q", lines[0], tc.sum)
			}
			got := lines[1:]
			for i := range got {
				got[i] = strings.TrimSpace(got[i])
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("lines\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

func TestMismatchErrorCapsLines(t *testing.T) {
	var e MismatchError
	for range maxShown + 5 {
		e.Missing = append(e.Missing, Spec{Name: "m", DType: U8})
	}
	lines := strings.Split(e.Error(), "\n")
	if len(lines) != 1+maxShown+1 || strings.TrimSpace(lines[len(lines)-1]) != "... and 5 more" {
		t.Errorf("got %d lines ending %q, want %d ending with the count", len(lines), lines[len(lines)-1], maxShown+2)
	}
}

func TestReadBySpec(t *testing.T) {
	d := openSmall(t)
	m := smallModel()["model-00001-of-00002.safetensors"]
	got, err := d.Read(t.Context(), Spec{Name: m[0].name, DType: m[0].dtype, Shape: m[0].shape})
	if err != nil || string(got) != string(m[0].bytes()) {
		t.Errorf("Read = %d bytes, %v; want the tensor's %d bytes", len(got), err, len(m[0].bytes()))
	}
	_, err = d.Read(t.Context(), Spec{Name: m[0].name, DType: F32, Shape: m[0].shape})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "want [16 8] F32, got [16 8] BF16") {
		t.Errorf("Read with a wrong dtype: %v", err)
	}
	if _, err = d.Read(t.Context(), Spec{Name: "absent"}); !errors.Is(err, ErrMismatch) {
		t.Errorf("Read of an absent tensor: %v", err)
	}
}
