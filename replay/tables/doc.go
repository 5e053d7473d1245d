// Package tables turns replay results into Apache Arrow tables and writes and reads them as Arrow IPC
// files and streams and Parquet files: the form in which potato-k3 hands results to researchers (Go notebooks,
// pyarrow, polars, DuckDB).
//
// # Tables
//
// Build converts []replay.Result into a Set of up to five tables; schema.go documents every column:
//
//	tokens   seq_id pos token_id token message channel target_id logprob rank entropy
//	         topk_ids topk_tokens topk_logprobs conversation thinking
//	lens     seq_id pos layer entropy target_logprob target_rank topk_ids topk_tokens topk_logprobs
//	hidden   seq_id pos layer vector (fixed_size_list<float32 or float16>[dim])
//	router   seq_id pos layer expert_ids expert_weights
//	attnres  seq_id pos layer site weights
//
// tokens is always there; each other table is nil in the Set when no result carries that output. logprob,
// rank, target_logprob and target_rank are null where a position has no target (the last one).
// topk_tokens names each top-k id with its text piece, rendered as the token column (Options.Piece, from
// the tokenizer), so that a notebook reading the tables from a remote engine needs no tokenizer; its lists
// are empty when the builder had none. Every schema carries metadata: "potato.table" (the table's name),
// "potato.schema_version" (SchemaVersion), and whatever the caller passes in Options.Metadata (use
// MetaConfigHash, MetaEngine, MetaPrecision, MetaBackend).
//
// Rows come in the order of the results, then of each result's captures, then of positions. A table is a
// slice of record batches of at most Options.BatchRows rows (64k by default; hidden batches are also kept
// under 64 MiB of vectors), so that no builder grows to the size of a whole 100k-token wave. Batches cut
// anywhere, including inside a sequence. A server that should not hold a whole Set can stream each table
// with NewReader and WriteIPCFrom, one batch in memory at a time.
//
// float16 vectors (Options.HiddenFloat16) are converted with github.com/x448/float16 (IEEE round to
// nearest even, subnormals kept); arrow-go's own float16.New truncates and flushes subnormals to zero.
//
// # Files
//
// WriteSet writes one file per table, the table name inserted before the extension, which picks the
// format (.arrow: an Arrow IPC file, random access, what readers that open a path expect; .arrows: an
// Arrow IPC stream; .parquet: zstd-compressed Parquet with the Arrow schema stored in it):
//
//	--out results.arrow     results.tokens.arrow   results.lens.arrow   results.hidden.arrow ...
//	--out results.parquet   results.tokens.parquet results.lens.parquet ...
//
// A Set is one result set, published whole or not at all: its tables are written into a temporary
// directory beside the target and renamed into place only when all are written, and an earlier run's
// tables that this set does not hold are removed. WriteSetFrom publishes a set the same way from
// readers, batch by batch, for tables too large to hold (a dataset job's merge). Both take a context,
// checked between record batches and tables: a cancelled write (Ctrl-C, a server's shutdown) returns an
// error wrapping ctx.Err() and leaves nothing behind, as a failed one does. Every producer stamps
// each table with ProvenanceKeys (MetaResultSet, one id a run; MetaRequestHash; MetaConfigHash;
// MetaEngine; MetaPrecision; MetaBackend), and ReadSet refuses tables of two result sets. ReadFile, ReadIPC,
// ReadIPCFile and ReadParquet read one table (ReadFile also reads a .arrow file that holds a stream, as
// written before schema version 3). Over HTTP, WriteIPC's stream is served as ContentType,
// application/vnd.apache.arrow.stream.
//
// From Python and DuckDB (the .arrow lines read the IPC file format; .arrows needs a stream reader):
//
//	import pyarrow, pyarrow.feather, pyarrow.parquet
//	tokens = pyarrow.ipc.open_file("results.tokens.arrow").read_all()   # or pyarrow.feather.read_table
//	tokens = pyarrow.ipc.open_stream(open("results.tokens.arrows", "rb")).read_all()
//	tokens = pyarrow.parquet.read_table("results.tokens.parquet")
//	tokens.schema.metadata[b"potato.table"]       # b"tokens"
//
//	import polars
//	tokens = polars.read_ipc("results.tokens.arrow")          # polars.read_ipc_stream for .arrows
//
//	-- DuckDB: Parquet natively; Arrow IPC files with the community arrow extension
//	SELECT * FROM 'results.tokens.parquet';
//	INSTALL nanoarrow FROM community; LOAD nanoarrow; SELECT * FROM read_arrow('results.tokens.arrow');
//
// # Back to Go values
//
// FromRecords turns tokens records (from Build, a file, or a query that kept the column names and types)
// back into per-sequence replay.Results; FromSet does the same for a whole Set, lens, hidden, router and
// attnres included. Columns are found by name; a missing column or a wrong type is an error naming the
// table and the column. topk_tokens is optional there (files written before schema version 2 lack it) and
// is not read back: Build names the ids again.
package tables
