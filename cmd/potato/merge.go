package main

import (
	"context"
	"fmt"
	"io"

	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/tables"
)

func init() {
	commands["merge"] = command{"merge dataset-job directories (the shards of one job) into one table set", runMerge}
}

func runMerge(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("merge", "usage: potato merge --out FILE.parquet|FILE.arrow|FILE.arrows [--partial] DIR...\n\n"+
		"Merges the dataset-job directories (the shards of one job) into one table set, as a single replay writes it.\n"+
		"Flags may come before or after the directories.\n")
	out := fs.String("out", "", "the table set to write: FILE.parquet, FILE.arrow or FILE.arrows (FILE.tokens.parquet, ...)")
	partial := fs.Bool("partial", false, "merge incomplete jobs and shard sets with shards missing")
	dirs, err := parseInterspersed(fs, args, stdout) // merge results/shard-* --out all.parquet
	if err != nil {
		return err
	}
	if *out == "" || len(dirs) == 0 {
		return usagef("merge", "merge: give --out FILE.parquet and the job directories")
	}
	// --out is checked before any part is read, as replay's is: a missing or unwritable directory failed
	// only at the write, after every part of every shard was read and checked.
	if err := checkOut(*out); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	// A fresh result-set id, as `potato replay --out` stamps its tables: tables.ReadSet then refuses the
	// merged tables beside another run's.
	sum, err := job.Merge(ctx, *out, dirs, job.MergeOptions{Partial: *partial, ResultSet: tables.NewSetID()})
	if err != nil {
		return err
	}
	for _, p := range sum.Files {
		fmt.Fprintln(stdout, "wrote", p)
	}
	dirWord := "directories"
	if sum.Dirs == 1 {
		dirWord = "directory"
	}
	fmt.Fprintf(stdout, "merged %s from %s of %s %s\n", numtext.Count(sum.Conversations, "conversation"), numtext.Count(sum.Parts, "part"), numtext.Commas(sum.Dirs), dirWord)
	return nil
}
