package checkpoint

import (
	"fmt"
	"slices"
	"strings"
)

// MismatchError lists every way a checkpoint differs from what the model needs, so that one failed load
// says everything at once and nothing is silently left unloaded. It matches ErrMismatch with errors.Is.
// The lists are complete; Error prints the first few of each with a count.
type MismatchError struct {
	Dir        string
	Missing    []Spec        // required by the model, absent from the checkpoint
	Wrong      []WrongTensor // present with another dtype or shape
	Unused     []Tensor      // present but not required (and not skipped)
	Duplicated []string      // names the spec list itself repeats: a bug in the layer plan
}

// WrongTensor is a tensor whose dtype or shape differs from its Spec.
type WrongTensor struct {
	Want Spec
	Got  Tensor
}

// String renders the line Check's error uses: `tensor X: want [7168 576] BF16, got [7168 512] BF16`.
func (w WrongTensor) String() string {
	return fmt.Sprintf("tensor %s: want %s %s, got %s %s", w.Want.Name, ShapeString(w.Want.Shape), w.Want.DType,
		ShapeString(w.Got.Shape), w.Got.DType)
}

// maxShown bounds the lines Error prints per category: a directory of the wrong model would otherwise
// produce a message of half a million lines.
const maxShown = 20

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %s does not match the model: %d missing, %d wrong, %d unused",
		e.Dir, len(e.Missing), len(e.Wrong), len(e.Unused))
	if len(e.Duplicated) > 0 {
		fmt.Fprintf(&b, ", %d duplicated in the spec list", len(e.Duplicated))
	}
	section := func(n int, line func(i int) string) {
		for i := range min(n, maxShown) {
			b.WriteString("\n  ")
			b.WriteString(line(i))
		}
		if n > maxShown {
			fmt.Fprintf(&b, "\n  ... and %d more", n-maxShown)
		}
	}
	section(len(e.Missing), func(i int) string {
		s := e.Missing[i]
		return fmt.Sprintf("tensor %s: missing, want %s %s", s.Name, ShapeString(s.Shape), s.DType)
	})
	section(len(e.Wrong), func(i int) string { return e.Wrong[i].String() })
	section(len(e.Unused), func(i int) string {
		t := e.Unused[i]
		return fmt.Sprintf("tensor %s: unused, %s %s in %s", t.Name, ShapeString(t.Shape), t.DType, t.File)
	})
	section(len(e.Duplicated), func(i int) string { return "spec " + e.Duplicated[i] + ": listed more than once" })
	return b.String()
}

// Unwrap makes errors.Is(err, ErrMismatch) hold.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Check compares the checkpoint with the tensors the model needs. It returns nil when every spec is
// present with its dtype and shape and every tensor of the checkpoint is required, except those whose
// names start with one of skipPrefixes (parts of the checkpoint the engine deliberately ignores, like
// K3's "vision_tower." and "mm_projector."). Otherwise it returns one *MismatchError listing everything.
func (d *Dir) Check(specs []Spec, skipPrefixes ...string) error {
	e := &MismatchError{Dir: d.path}
	used := make([]bool, len(d.tensors))
	var dupSeen map[string]bool // built only if a repeat is seen
	for _, s := range specs {
		i, ok := d.byName[s.Name]
		if !ok {
			e.Missing = append(e.Missing, s)
			continue
		}
		if used[i] {
			if dupSeen == nil {
				dupSeen = map[string]bool{}
			}
			if !dupSeen[s.Name] {
				dupSeen[s.Name] = true
				e.Duplicated = append(e.Duplicated, s.Name)
			}
			continue
		}
		used[i] = true
		if t := d.tensors[i]; t.DType != s.DType || !slices.Equal(t.Shape, s.Shape) {
			e.Wrong = append(e.Wrong, WrongTensor{Want: s, Got: t})
		}
	}
	for i, t := range d.tensors {
		if !used[i] && !hasAnyPrefix(t.Name, skipPrefixes) {
			e.Unused = append(e.Unused, t)
		}
	}
	if len(e.Missing)+len(e.Wrong)+len(e.Unused)+len(e.Duplicated) == 0 {
		return nil
	}
	slices.SortFunc(e.Missing, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(e.Wrong, func(a, b WrongTensor) int { return strings.Compare(a.Want.Name, b.Want.Name) })
	slices.SortFunc(e.Unused, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(e.Duplicated)
	return e
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
