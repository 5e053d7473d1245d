package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// Example writes a one-tensor checkpoint (model.safetensors, no index), opens it, checks it against the
// model's expectations, reads the tensor and decodes it.
func Example() {
	dir, _ := os.MkdirTemp("", "checkpoint-example-")
	defer os.RemoveAll(dir)
	header := `{"norm.weight":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}`
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(file, header...)
	file = append(file, 0x80, 0x3f, 0x00, 0xc0, 0x40, 0x3e) // bfloat16 1, -2, 0.1875
	os.WriteFile(filepath.Join(dir, checkpoint.SingleFile), file, 0o644)

	d, err := checkpoint.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	want := []checkpoint.Spec{{Name: "norm.weight", DType: checkpoint.BF16, Shape: []int64{3}}}
	if err := d.Check(want); err != nil {
		fmt.Println(err)
		return
	}
	t, _ := d.Lookup("norm.weight")
	raw := make([]byte, t.Size)
	if err := d.ReadInto(context.Background(), t, raw); err != nil {
		fmt.Println(err)
		return
	}
	w := make([]float32, 3)
	checkpoint.DecodeBF16(w, raw)
	fmt.Println(t.Spec(), w)

	// A plan that expects another shape gets every difference in one error.
	err = d.Check([]checkpoint.Spec{{Name: "norm.weight", DType: checkpoint.BF16, Shape: []int64{4}},
		{Name: "lm_head.weight", DType: checkpoint.BF16, Shape: []int64{8, 4}}})
	fmt.Println(strings.ReplaceAll(err.Error(), dir, "DIR"))
	// Output:
	// norm.weight [3] BF16 [1 -2 0.1875]
	// checkpoint DIR does not match the model: 1 missing, 1 wrong, 0 unused
	//   tensor lm_head.weight: missing, want [8 4] BF16
	//   tensor norm.weight: want [4] BF16, got [3] BF16
}
