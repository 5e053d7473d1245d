package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/replay/tables"
)

func init() {
	commands["merge"] = command{"merge dataset-job directories (the shards of one job) into one table set", runMerge}
}

func runMerge(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	out := fs.String("out", "", "the table set to write: FILE.parquet, FILE.arrow or FILE.arrows (FILE.tokens.parquet, ...)")
	partial := fs.Bool("partial", false, "merge incomplete jobs and shard sets with shards missing")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: potato merge --out FILE.parquet|FILE.arrow|FILE.arrows DIR...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("merge: give --out FILE.parquet and the job directories")
	}
	// A fresh result-set id, as `potato replay --out` stamps its tables: tables.ReadSet then refuses the
	// merged tables beside another run's.
	sum, err := job.Merge(ctx, *out, fs.Args(), job.MergeOptions{Partial: *partial, ResultSet: tables.NewSetID()})
	if err != nil {
		return err
	}
	for _, p := range sum.Files {
		fmt.Fprintln(stdout, "wrote", p)
	}
	fmt.Fprintf(stdout, "merged %d conversations from %d parts of %d directories\n", sum.Conversations, sum.Parts, sum.Dirs)
	return nil
}
