package main

import (
	"fmt"
	"path/filepath"

	"github.com/potato-k3/potato-k3/internal/diskspace"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// shapeOf is what tables' estimate needs of l's model: the plan, and the tokenizer's pieces that name
// top-k ids (topk_tokens).
func shapeOf(l *loaded) tables.Shape {
	var piece func(int32) string
	if l.tok != nil {
		piece = l.tok.Piece
	}
	return tables.ShapeOf(l.engine.Plan, piece)
}

// checkResultBytes refuses a replay whose results, with the tables --out builds and writes from them
// (none without --out), would hold more than --max-result-bytes (0: tables.DefaultResultLimit) at once.
func (f *replayFlags) checkResultBytes(l *loaded, req replay.Request) error {
	format := ""
	if f.out != "" {
		format, _ = tables.FormatOf(f.out) // checked before the engine opened (checkOut)
	}
	est := shapeOf(l).Estimate(tables.Output{Request: req, Format: format, Float16: f.float16})
	if err := checkEstimate(est, req.Options, int64(f.maxResult), "over every token", "split the input"); err != nil {
		return err
	}
	if f.out == "" {
		return nil
	}
	return checkDisk(f.out, format, est)
}

// freeSpace is diskspace.Free; tests give a full disk without filling one.
var freeSpace = diskspace.Free

// minFree is the room below which a file system counts as full: no table set fits in it.
const minFree = 1 << 20

// checkDisk refuses --out on a file system without room for the tables, before the compute: a full disk
// was found only at the write, after a whole pass over the weights (K3's is minutes to hours). The
// files' least size is taken from the estimate's results, which the tables hold again: Arrow IPC files
// measured 0.6-1.6 times them, Parquet 0.2-0.75 (the demo model; hidden states compress least), so
// half of them, and an eighth for Parquet, is a size the files do not go below.
func checkDisk(out, format string, est tables.Estimate) error {
	dir := filepath.Dir(out)
	free, ok := freeSpace(dir)
	if !ok {
		return nil
	}
	least := est.Results / 2
	if format == tables.FormatParquet {
		least = est.Results / 8
	}
	if need := max(least, minFree); free < need {
		return fmt.Errorf("replay: --out %s: %s has %s free and the tables need at least %s: free some space or write them elsewhere (nothing was computed)",
			out, dir, numtext.Bytes(free), numtext.Bytes(need))
	}
	return nil
}

// checkEstimate refuses est past limit (0: tables.DefaultResultLimit), saying what asked for the memory
// (o's layers and top-k, over what) and what else to change (hint).
func checkEstimate(est tables.Estimate, o replay.Options, limit int64, over, hint string) error {
	why := "--max-result-bytes"
	if limit == 0 {
		var what string
		limit, what = tables.DefaultResultLimit()
		why += "; " + what
	}
	if need := est.Total(); need > limit {
		return fmt.Errorf("replay: the results would hold about %s in memory (%d hidden and %d lens layers, top-k %d, %s): the limit is %s (%s): ask for fewer layers or a smaller top-k, or %s (of it results %s, tables %s, writing them %s)",
			numtext.Bytes(need), len(o.Hidden), len(o.Lens), o.TopK, over, numtext.Bytes(limit), why, hint,
			numtext.Bytes(est.Results), numtext.Bytes(est.Tables), numtext.Bytes(est.Transient))
	}
	return nil
}
