// Package server is the resident engine that notebooks talk to (`potato serve`): it keeps the model open,
// gathers the requests of every client into shared layer-major waves, streams progress, spills results
// to Parquet and serves them as Arrow IPC streams. The cell-side client is package kernel; the wire
// types are in package kernel/api.
//
// # Running one
//
//	potato serve                                  # embedded tiny model, 127.0.0.1:7878
//	potato serve --model /models/k3 --listen unix:/run/potato.sock
//	potato serve --listen 0.0.0.0:7878 --token-file ~/.potato-token   # off loopback: a token is required
//
// In Go: New opens the engine and finds the spilled jobs, Serve answers on a listener, Shutdown stops.
// Paths (model, spill) come only from Config: no request can name a file on the server.
//
// # The HTTP API
//
// Requests are JSON (unknown fields refused), answers JSON except tables (Arrow IPC streams) and progress
// (newline-delimited JSON). Every error is {"error": "...", "limit": "--flag"} with a 4xx or 5xx status.
// With a token, every request carries "Authorization: Bearer TOKEN" or gets 401.
//
//	GET    /v1/health                      {"status": "ok", "version": "0.1.0", "pid": 1234}
//	GET    /v1/info                        model dir, config hash, engine version, backend, precisions
//	                                       (default, accepted, open), layers, vocab, hidden, layer kinds,
//	                                       experts, experts per token, tokenizer, limits
//	POST   /v1/jobs                        submit a job: 202, its status, Location: /v1/jobs/ID
//	GET    /v1/jobs                        every job's status, oldest first
//	GET    /v1/jobs/ID                     the job's status (state, queue position, wave, progress,
//	                                       tables, fetched, expires, error)
//	GET    /v1/jobs/ID/progress            progress lines until the job is done, failed or cancelled
//	GET    /v1/jobs/ID/tables/NAME         a done job's table (tokens, lens, hidden, router, attnres) as
//	                                       application/vnd.apache.arrow.stream
//	POST   /v1/jobs/ID/tables/NAME/received   confirm the table was read to its end: 204 (409 if it was
//	                                       not sent to its end); only then does it count as fetched
//	POST   /v1/jobs/ID/cancel              cancel a queued or running job (409 when it is over)
//	DELETE /v1/jobs/ID                     cancel if needed, and delete the job and its results now: 204
//
// A job request:
//
//	{
//	  "inputs": [                                        // in order: their index is seq_id
//	    {"text": "The quick brown fox"},
//	    {"conversation": {"messages": [{"role": "user", "content": "Hi"}], "thinking": false}},
//	    {"tokens": [163584, 1, 2, 3]}
//	  ],
//	  "thinking": false,                                 // for conversations that do not say; optional
//	  "options": {"top_k": 5, "hidden": [0, 46], "lens": [10, 92], "lens_all": false, "router": false,
//	              "attnres": false, "precision": "bf16", "float16": false},
//	  "label": "pilot run"                               // optional, shown with the job; at most 256 bytes
//	}
//
// A conversation is in the common chat shape package datasets reads from files (an unknown key is
// refused, naming it); its thinking mode must be given, on it or on the request, since the model's
// output depends on it; the request's mode fills in conversations that give none, and one that gives the
// other mode is refused. A repeated layer in hidden or lens is refused (replay.CheckLayers, the CLI's
// rule too). A progress line:
//
//	{"id": "…", "state": "running", "wave": 3, "layer": 17, "layers": 93, "tokens": 12345,
//	 "bytes_read": 281000000000, "bytes_per_second": 41200000000, "elapsed_s": 6.8, "eta_s": 30.4}
//
// Refusals: malformed JSON, unknown fields, a key given twice or in another case than its field's, no
// inputs, an input with not exactly one of text, conversation, tokens, an empty sequence, a token id
// outside the vocabulary, a layer outside the model, a top_k past the vocabulary, an unknown precision,
// a conversation without thinking mode, a request-level "thinking" without a conversation, a label
// longer than api.MaxLabelBytes (256 bytes; it is echoed in every status and job list): 400, the
// message naming the field ("inputs[2].tokens[7]: token id 170000 outside the vocabulary 0..163839").
// Past --max-body-bytes, --max-tokens or --max-wave-tokens (one sequence), --max-request-tokens,
// --max-sequences, --max-top-k or --max-result-bytes (the memory the results, their tables and the
// Parquet writer would hold until written, tables.Shape.Estimate): 413, with "limit" naming the flag.
// A job the server cannot record because the spill directory's disk is full or over quota: 507, and
// nothing of it stays on disk. The server's own failures (a disk error, a table it cannot read back)
// answer 500 with what failed and the system's reason but none of the server's paths; its log has the
// full error.
//
// The tables name the top-k ids with the tokenizer's pieces (the topk_tokens column of the tokens and lens
// tables; empty lists for a model without a tokenizer), and Info gives the model's shape, so that a
// notebook on another machine never needs the model directory, which is only a path on this one.
//
// # Waves
//
// Jobs queued while the engine is busy, or within --gather of each other at an idle engine, go through
// the weights together, in arrival order up to --max-wave-tokens (a larger job runs alone, split by the
// engine into passes of at most --max-wave-tokens, which bounds the memory a pass holds) and up to
// --max-result-bytes of results, counting those of earlier waves still being written (a job that does
// not fit waits for a later wave); a wave holds jobs of one precision. Each job's results are exactly those of replaying it alone (the wave computes
// the union of the options and hands each job its own). A job's status names its wave and the jobs that
// shared it. A wave of several jobs that fails (a damaged tensor that one job's tokens read, an I/O
// error) is retried one job at a time, so that each job fails or succeeds as it would alone. The
// default precision's engine opens at start; the other (bf16 or fp32) opens on the first
// job that asks for it and stays open, and waves of the two run one at a time.
//
// # Results outlive clients and restarts
//
// A finished job's tables are built batch by batch as they are written to SPILL/ID/result.NAME.parquet
// (one set, each file atomically) and then
// its manifest SPILL/ID/job.json says done; the manifest is first written when the job is queued, and
// again when its wave starts. A client that drops its connection or its progress stream cancels nothing: it fetches by id later. Only
// the cancel endpoint (or DELETE) cancels; a cancelled job in a shared wave drops out and the wave goes
// on for the others, and a wave whose jobs are all cancelled stops; a job cancelled while its tables
// are written stops at the next record batch. A job whose tables cannot be written fails, and its
// manifest says so; its error names what failed and the system's reason (on a full disk, what to do)
// but none of the server's paths, which the log has. Results stay until every table has
// been fetched once, then for --keep; failed and cancelled jobs' status stays for --keep. A server
// started on the same spill directory serves the done jobs again and reports the jobs its predecessor
// left queued or running as failed ("the server (pid N) stopped while this job was running; its
// results were never written: submit it again"). One server at a time holds a spill directory (a lock
// file). On SIGTERM the server stops accepting, fails the queued jobs, lets the wave in flight finish
// (failing it after --shutdown-timeout), writes its results (stopping those still being written once
// --shutdown-timeout is up, their jobs failed) and exits.
package server
