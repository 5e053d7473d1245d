package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func init() {
	commands["inspect"] = command{"audit a model directory against the K3 layer plan and tensor manifest", runInspect}
}

// errDamaged is returned when the audit found violations; they have been printed already.
var errDamaged = errors.New("inspect: the directory does not match the spec")

// runInspect parses `potato inspect [--model] DIR` and prints the audit: the layer map, tensor counts and
// bytes per layer kind and in total, dtypes, and every violation of the spec, each naming its file and
// tensor. The model is named as for every other command (--model DIR; without it the embedded default);
// the directory as the one argument stays accepted.
func runInspect(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("inspect", "usage: potato inspect [--layers=false] [--model DIR | DIR]\n\n"+
		"Audits a model directory (the embedded default without one) against the K3 layer plan and tensor manifest:\n"+
		"the layer map, tensor counts and bytes, dtypes, the tokenizer, and every violation of the spec.\n"+
		"Flags may come before or after DIR.\n")
	layers := fs.Bool("layers", true, "print one line per layer")
	model := fs.String("model", "", "model directory (default: the embedded demo model, a small K3 trained on text)")
	dirs, err := parseInterspersed(fs, args, stdout) // inspect DIR --layers=false read --layers=false as a second directory
	if err != nil {
		return err
	}
	switch {
	case len(dirs) > 1, len(dirs) == 1 && *model != "":
		return usagef("inspect", "inspect: want one model directory (--model DIR or DIR)")
	case len(dirs) == 1:
		*model = dirs[0]
	}
	if st, err := os.Stat(*model); err == nil && !st.IsDir() {
		if _, ferr := tables.FormatOf(*model); ferr == nil { // a result table, not a model
			return fmt.Errorf("inspect: %s is a result table, not a model directory: potato show %s prints it", *model, *model)
		}
		return fmt.Errorf("inspect: %s is a file, not a model directory", *model)
	}
	dir, err := modelDir(ctx, *model)
	if err != nil {
		return err
	}
	return inspect(dir, *layers, stdout)
}

// inspect audits dir. A config that cannot be planned, a shard or index that cannot be opened, or
// tensors that differ from the manifest are printed and make it return errDamaged (wrapped with a count).
func inspect(dir string, perLayer bool, w io.Writer) error {
	plan, err := model.ReadFile(dir)
	if err != nil {
		fmt.Fprintf(w, "VIOLATION config.json: %v\n", err)
		return fmt.Errorf("%w: %s: %v", errDamaged, dir, err)
	}
	d, err := checkpoint.Open(dir)
	if err != nil {
		n := printJoined(w, err)
		return fmt.Errorf("%w: %s: %s reading the shards and index", errDamaged, dir, numtext.Count(n, "problem"))
	}
	defer d.Close()
	c := plan.Config
	fmt.Fprintf(w, "%s: kimi_k3, %s, hidden %d, vocabulary %d, %d experts (%d active, %d shared), AttnRes blocks of %d\n",
		dir, numtext.Count(c.NumHiddenLayers, "layer"), c.HiddenSize, c.VocabSize, c.NumExperts, c.NumExpertsPerToken, c.NumSharedExperts, c.AttnResBlockSize)
	printLayerMap(w, plan)
	tally := tallyTensors(d.Tensors(), plan)
	if perLayer {
		printLayers(w, plan, tally)
	}
	printKinds(w, plan, tally)
	sum := d.Summary()
	fmt.Fprintln(w, sum.String())
	problems := 0
	if sum.IndexTotalSize >= 0 && sum.IndexTotalSize != sum.Bytes {
		fmt.Fprintf(w, "VIOLATION %s: metadata.total_size %d, the shards hold %d bytes of tensor data\n",
			checkpoint.IndexFile, sum.IndexTotalSize, sum.Bytes)
		problems++
	}
	if err := plan.Fit(d.Lookup); err != nil {
		fmt.Fprintf(w, "VIOLATION %v\n", err)
		problems++
	} else if err := plan.CheckDir(d); err != nil {
		problems += printMismatch(w, err)
	}
	problems += checkTokenizer(w, dir, plan.Config)
	if problems > 0 {
		return fmt.Errorf("%w: %s: %s", errDamaged, dir, numtext.Count(problems, "problem"))
	}
	fmt.Fprintln(w, "OK: every tensor the plan requires is present with its dtype and shape; nothing else but the image path")
	return nil
}

// checkTokenizer loads tiktoken.model and tokenizer_config.json and checks them against text_config: the
// vocabulary size and the BOS, stop (eos_token_id) and PAD ids. It prints each problem and counts them.
func checkTokenizer(w io.Writer, dir string, c model.TextConfig) int {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		fmt.Fprintf(w, "VIOLATION tokenizer: %v\n", err)
		return 1
	}
	problems := 0
	if tok.VocabSize() != c.VocabSize {
		fmt.Fprintf(w, "VIOLATION %s: %d tokens, config.json says vocab_size %d\n", tokenizer.ModelFile, tok.VocabSize(), c.VocabSize)
		problems++
	}
	stop, _ := tok.SpecialID("<|end_of_msg|>")
	for _, id := range []struct {
		field     string
		got, want int
	}{{"bos_token_id", int(tok.BOS()), c.BOSTokenID}, {"eos_token_id", int(stop), c.EOSTokenID}, {"pad_token_id", int(tok.PAD()), c.PadTokenID}} {
		if id.got != id.want {
			fmt.Fprintf(w, "VIOLATION %s: the tokenizer's token for text_config.%s is id %d, config.json says %d\n",
				tokenizer.ConfigFile, id.field, id.got, id.want)
			problems++
		}
	}
	if problems == 0 {
		fmt.Fprintf(w, "tokenizer: %d BPE tokens + %d specials; BOS %d, stop %d, PAD %d as in config.json\n",
			tok.NumBPE(), tok.VocabSize()-tok.NumBPE(), tok.BOS(), stop, tok.PAD())
	}
	return problems
}

// printJoined prints each error of a (possibly joined) error on its own VIOLATION line and counts them.
func printJoined(w io.Writer, err error) int {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		fmt.Fprintf(w, "VIOLATION %v\n", e)
	}
	return len(errs)
}

// printMismatch prints every entry of a *checkpoint.MismatchError with the file that holds the tensor.
func printMismatch(w io.Writer, err error) int {
	var m *checkpoint.MismatchError
	if !errors.As(err, &m) {
		return printJoined(w, err)
	}
	for _, s := range m.Missing {
		fmt.Fprintf(w, "VIOLATION (no shard): tensor %s: missing, want %s %s\n", s.Name, checkpoint.ShapeString(s.Shape), s.DType)
	}
	for _, x := range m.Wrong {
		fmt.Fprintf(w, "VIOLATION %s: tensor %s: want %s %s, got %s %s\n", x.Got.File, x.Want.Name,
			checkpoint.ShapeString(x.Want.Shape), x.Want.DType, checkpoint.ShapeString(x.Got.Shape), x.Got.DType)
	}
	for _, t := range m.Unused {
		fmt.Fprintf(w, "VIOLATION %s: tensor %s: not part of the model (%s %s)\n", t.File, t.Name, checkpoint.ShapeString(t.Shape), t.DType)
	}
	for _, n := range m.Duplicated {
		fmt.Fprintf(w, "VIOLATION (layer plan): tensor %s listed twice\n", n)
	}
	return len(m.Missing) + len(m.Wrong) + len(m.Unused) + len(m.Duplicated)
}

// tally counts the tensors of a directory by where they belong.
type tally struct {
	layerTensors []int
	layerBytes   []int64 // everything of the layer, experts included
	expertBytes  []int64
	global       int
	globalBytes  int64
	ignored      int
	ignoredBytes int64
	other        int // names outside every known place (reported by Check as unused)
}

func tallyTensors(ts []checkpoint.Tensor, plan *model.Plan) tally {
	n := len(plan.Layers)
	t := tally{layerTensors: make([]int, n), layerBytes: make([]int64, n), expertBytes: make([]int64, n)}
	prefix := model.TextPrefix + "layers."
	for _, x := range ts {
		switch {
		case model.Ignored(x.Name):
			t.ignored++
			t.ignoredBytes += x.Size
		case strings.HasPrefix(x.Name, prefix):
			num, _, _ := strings.Cut(x.Name[len(prefix):], ".")
			i, err := strconv.Atoi(num)
			if err != nil || i < 0 || i >= n {
				t.other++
				continue
			}
			t.layerTensors[i]++
			t.layerBytes[i] += x.Size
			if strings.Contains(x.Name, ".experts.") {
				t.expertBytes[i] += x.Size
			}
		default:
			t.global++
			t.globalBytes += x.Size
		}
	}
	return t
}
