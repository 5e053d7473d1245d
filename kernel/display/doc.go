// Package display renders Arrow results as HTML for GoNB notebook cells: tables of records, and a
// progress bar that updates in place while a replay wave streams through the model.
//
// Every renderer is a pure function that returns a string, so it is tested without a notebook; the
// Display* functions and ProgressBar are thin calls of gonbui on that string (and do nothing outside a
// notebook).
//
// # Tables
//
// A cell that has a tokens record from the engine shows its first rows with
//
//	display.Display(rec, 20)
//
// The header names each column and its Arrow type (list<int32>, fixed_size_list<float16>[7168]); lists
// show their first eight elements and their length, floats four significant digits, strings are escaped
// and their control characters written as \n or \t, so that a token piece " the" or "\n" stays visible.
// The footer reads "1,024 rows × 13 columns (first 20 shown)". HTMLRecords and HTMLTableOf do the same
// for several record batches of one schema and for an arrow.Table.
//
// # Progress
//
// A cell that waits on a wave shows where it is:
//
//	bar := display.NewProgressBar()
//	for p := range reports { // display.Progress values from the engine
//		bar.Update(p)
//	}
//	bar.Finish(last)
//
// which renders as a bar and "17 of 93 layers done · next layer 17 · 12,345 tokens · 41.2 GB/s · ETA 3m12s" (layers are counted done, and named from 0 as in the tables). ProgressHTML is
// the pure rendering, with Progress.Fraction, Rate and ETA behind it.
package display
