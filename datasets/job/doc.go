// Package job runs a dataset of conversations through the replay engine as a resumable dataset job:
// waves of conversations, each written as Parquet parts and recorded in a manifest before the next
// begins, so that a crash loses at most the wave in flight, and shards of the dataset by conversation id,
// so that N machines cover it exactly once and Merge puts their parts back together as one table set
// equal, byte for byte, to a single replay's.
//
// `potato replay --chat DATA --out DIR/` is this package's command line (cmd/potato/datasetjob.go):
//
//	items := ...                                  // the shard's conversations: ID, Seq (index in the dataset), tokens
//	sum, err := job.Run(ctx, engine, job.Config{Dir: "results/", Settings: s, Shard: shard, ...}, items)
//	_, err = job.Merge(ctx, "all.parquet", []string{"results/shard-0-of-2", "results/shard-1-of-2"}, job.MergeOptions{})
//
// # The directory
//
// A job directory holds manifest.json (Manifest: the settings and their Key, the shard, every finished
// Part and which part holds each conversation), one Parquet file per table and part
// (part-00000.tokens.parquet, part-00000.lens.parquet, ...), and .lock, which the running job holds with
// flock. A part's files are written as one set (tables.WriteSet: staged in a temporary folder, synced and
// renamed), each recorded in the manifest with its size and SHA-256; then the manifest that names them is
// written the same way. Run begins by making the directory match its manifest: parts whose files are
// missing, changed (size or SHA-256) or named by a path that leaves the directory are dropped (their
// conversations run again), and part files or temporary files and folders the manifest does not name
// (the wave a crash interrupted) are deleted.
//
// # Keys and shards
//
// Settings are everything that changes a row (the dataset's hash, the model's config and tokenizer, the
// engine version, precision, backend, thinking default and the requested outputs); their Key is the
// manifest's key, and a job resumed with other settings, or another shard, is refused with the
// difference named. Options that never change a result (memory budgets, slices, expert chunks, the wave
// size) are not in it. A conversation belongs to shard ShardOf(id, N): the SHA-256 of its id, modulo N.
//
// # Rows
//
// Each conversation's rows keep Item.Seq as their seq_id, the index a single replay of the whole dataset
// gives it, so the parts of all shards hold exactly a single run's rows; Merge orders them by seq_id and
// cuts the record batches where tables.Build does, so its Parquet files equal a single run's byte for byte.
package job
