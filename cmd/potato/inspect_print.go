package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/model"
)

// layerKind names a layer's attention and FFN, as in `kda+moe`.
func layerKind(l model.Layer) string { return l.Attn.String() + "+" + l.FFN.String() }

// printLayerMap prints which layers are MLA and where AttnRes blocks start, 0-indexed.
func printLayerMap(w io.Writer, plan *model.Plan) {
	var starts []int
	for _, l := range plan.Layers {
		if l.BlockStart {
			starts = append(starts, l.Index)
		}
	}
	kda, mla := plan.LayerIndices(model.KDA), plan.LayerIndices(model.MLA)
	fmt.Fprintf(w, "layer map (0-indexed): %d KDA + %d MLA layers; dense FFN: %s\n", len(kda), len(mla),
		ints(denseLayers(plan)))
	fmt.Fprintf(w, "  MLA at %s\n", ints(mla))
	fmt.Fprintf(w, "  AttnRes blocks of %d start at %s (%d blocks)\n", plan.Config.AttnResBlockSize, ints(starts), len(starts))
}

func denseLayers(plan *model.Plan) []int {
	var out []int
	for _, l := range plan.Layers {
		if l.FFN == model.Dense {
			out = append(out, l.Index)
		}
	}
	return out
}

// ints renders a list of layer indices.
func ints(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}

// printLayers prints one line per layer: kind, block, tensors, bytes (own and experts).
func printLayers(w io.Writer, plan *model.Plan, t tally) {
	fmt.Fprintf(w, "%5s  %-9s %5s %8s %20s %20s\n", "layer", "kind", "block", "tensors", "bytes", "of which experts")
	for i, l := range plan.Layers {
		mark := ""
		if l.BlockStart {
			mark = "*"
		}
		fmt.Fprintf(w, "%5d  %-9s %4d%1s %8d %20s %20s\n", i, layerKind(l), l.Blocks-1, mark, t.layerTensors[i],
			numtext.Commas(t.layerBytes[i]), numtext.Commas(t.expertBytes[i]))
	}
	fmt.Fprintln(w, "  (block: the AttnRes block the layer belongs to; * marks the layer that starts it)")
}

// printKinds prints tensor counts and bytes per layer kind, the globals, the ignored image path, and totals.
func printKinds(w io.Writer, plan *model.Plan, t tally) {
	type agg struct {
		layers, tensors int
		bytes           int64
		per             map[int]bool // distinct tensors-per-layer counts
	}
	kinds := map[string]*agg{}
	var order []string
	for i, l := range plan.Layers {
		k := layerKind(l)
		a := kinds[k]
		if a == nil {
			a = &agg{per: map[int]bool{}}
			kinds[k] = a
			order = append(order, k)
		}
		a.layers++
		a.tensors += t.layerTensors[i]
		a.bytes += t.layerBytes[i]
		a.per[t.layerTensors[i]] = true
	}
	fmt.Fprintf(w, "%-34s %7s %14s %10s %22s\n", "part", "layers", "tensors/layer", "tensors", "bytes")
	total, totalBytes := t.global+t.ignored+t.other, t.globalBytes+t.ignoredBytes
	for _, k := range order {
		a := kinds[k]
		per := "varies"
		if len(a.per) == 1 {
			for n := range a.per {
				per = strconv.Itoa(n)
			}
		}
		fmt.Fprintf(w, "%-34s %7d %14s %10s %22s\n", k, a.layers, per, numtext.Commas(int64(a.tensors)), numtext.Commas(a.bytes))
		total += a.tensors
		totalBytes += a.bytes
	}
	fmt.Fprintf(w, "%-34s %7s %14s %10s %22s\n", "globals (embedding, norms, lm_head)", "", "", numtext.Commas(int64(t.global)), numtext.Commas(t.globalBytes))
	fmt.Fprintf(w, "%-34s %7s %14s %10s %22s\n", "ignored (vision_tower., mm_projector.)", "", "", numtext.Commas(int64(t.ignored)), numtext.Commas(t.ignoredBytes))
	if t.other > 0 {
		fmt.Fprintf(w, "%-34s %7s %14s %10d\n", "unplaceable layer names", "", "", t.other)
	}
	fmt.Fprintf(w, "%-34s %7d %14s %10s %22s\n", "total", len(plan.Layers), "", numtext.Commas(int64(total)), numtext.Commas(totalBytes))
}
