// Package kernel is what a GoNB notebook cell imports to replay Kimi K3 teacher-forced: it reaches the
// resident engine (starting one in the background the first time), sends requests, shows a progress bar
// while the engine streams the weights, and returns the results as Arrow records that render inline.
//
// It stays light on purpose: GoNB compiles the client into every cell, so it depends only on arrow-go,
// kernel/display (HTML tables and the progress bar), kernel/api (the wire format), the tokenizer's
// Conversation type, datasets/examples (the bundled conversations Example names) and GoNB's gonbui (to
// display in a cell), never on the engine or plotting.
//
// # A cell
//
//	c, err := kernel.Connect()
//	if err != nil { ... }
//	defer c.Close()
//	res, err := c.Replay(ctx,
//		kernel.Text("The quick brown fox"),
//		kernel.Chat(conv), // a tokenizer.Conversation; its thinking mode must be set
//		kernel.TopK(5), kernel.Lens(3, 7))
//	if err != nil { ... } // the engine's own message: "options.lens[0]: layer 99 outside 0..92 ..."
//	defer res.Release()
//	res.Display() // a summary line and the first rows of the tokens table
//
// A cell that connects only to replay one request says it in one call: ReplayCached (or Replay) connects
// as Connect() does, and the result's Release also closes that client:
//
//	res, err := kernel.ReplayCached(ctx, kernel.Example("greeting"), kernel.TopK(5))
//	if err != nil { ... }
//	defer res.Release()
//
// Inputs are Text, Texts, Chat, Example (a bundled conversation by id: kernel.Example("greeting")),
// Conversations and Tokens; their order is the seq_id of the results.
// Options are TopK, Hidden, Lens, LensAll, Router, AttnRes, Precision("fp32"), Float16, Thinking (for
// conversations that do not set their own) and Label. res.Tokens(), Lens(), Hidden(), Router() and
// AttnRes() are arrow.RecordBatch values, one per table (nil when not asked for); their columns are
// documented in package replay/tables. res.LookupTable(name) is the table by name with the reason when
// there is none: a name that is no table's ("lense") or a table the job did not capture. HTML is the
// pure rendering behind Display.
// res.MessageLogprob(seq, m) scores one chat message: the sum, mean and count of the logprobs of its own
// tokens (each read on the row before it, which predicts it; the chat markup left out, as in the mean
// `potato replay` prints "over the tokens of the messages").
//
// # Results across cells
//
// Every GoNB cell is a new program, so a result is gone when its cell ends. ReplayCached is Replay with a
// results cache on disk (CacheDir()/kernel/results, one Arrow IPC stream per table): a request equal to
// an earlier one, to an engine on the same model, reads the stored tables back (Result.FromCache)
// instead of replaying, so the cells of a notebook that look at one replay from different sides replay
// it once. A cell interrupted while its job runs leaves the job's id in the cache, and running the cell
// again waits for that job rather than submitting a second. Calls of one request at the same time
// (goroutines, or cells of two kernels sharing the cache directory) submit it once too: the others wait
// for that job.
//
// # Which engine
//
// Connect uses, in order:
//
//  1. WithAddr, or $POTATO_ADDR: http://host:port or unix:/path, with WithToken or $POTATO_TOKEN as the
//     bearer token. It must answer; Connect never starts another in its place.
//  2. The background engine an earlier cell started: CacheDir()/kernel/serve.json holds its address and
//     pid, and it must answer its health check with that pid. One whose pid is alive and holds its spill
//     directory but does not answer in time (busy, or paused) is an error, never replaced by a second.
//     One built from another checkout of potato-k3 than this program (serve.json names its source) is
//     used, with a line on stderr saying so: Shutdown, then Connect, starts this checkout's.
//  3. A new background engine: `potato serve` on the embedded default model (or WithModel), on a unix
//     socket in CacheDir()/kernel (a loopback port when that path is too long), in a session of its own
//     so that it outlives the cell, its output in CacheDir()/kernel/serve.log. Connect waits until it
//     answers (WithStartTimeout, 3 minutes by default); if it dies or does not answer, the error holds
//     the log's last lines. The potato command is $POTATO_BIN, else a potato next to the running
//     executable, else potato on PATH, else `go run github.com/potato-k3/potato-k3/cmd/potato`, which
//     needs go on PATH and the module in the cell's module or workspace (GoNB's --go_work) and compiles
//     first: Connect says so in one line on stderr (or WithProgress's writer), since that takes a minute
//     or two on a cold build cache. A program built from this module and run elsewhere has neither: set
//     $POTATO_BIN to a built potato (go build -o potato ./cmd/potato), as the error then says.
//
// Cells that Connect at once take turns on a lock file, so they start one engine between them. Shutdown
// stops the background engine; it is the only way this package stops one.
//
// # Jobs outlive cells
//
// Replay is Submit, Wait and Fetch. An interrupted cell or a broken connection does not cancel the job:
// the engine finishes it and keeps the results (spilled to Parquet) until they are fetched, so a later
// cell calls Fetch(ctx, id) with the id the error named. Only Cancel cancels. Jobs lists what the engine
// holds. The engine picks the id, so a cell interrupted while it submits has none: its error says the job
// may be queued all the same, and how to find it in Jobs (its time, sequences and Label).
//
// # Progress
//
// Inside GoNB (gonbui.IsNotebook, set from the environment GoNB gives the programs it runs) Wait shows a
// bar that updates in place: "17 of 93 layers done · next layer 17 · 12,345 tokens · 41.2 GB/s · ETA 3m12s" (layers are counted done, and named from 0 as in the tables). Elsewhere it is
// silent, unless WithProgress names a writer for one line per layer.
//
// # From Python
//
// The engine serves plain HTTP with Arrow IPC streams, so pyarrow, polars and DuckDB read the same
// results (the paths are in package kernel/api; add an Authorization header when the engine has a
// token):
//
//	import json, urllib.request, pyarrow
//	base = "http://127.0.0.1:7878"
//	req = urllib.request.Request(base + "/v1/jobs", method="POST",
//	    data=json.dumps({"inputs": [{"text": "The quick brown fox"}], "options": {"top_k": 5}}).encode())
//	job = json.load(urllib.request.urlopen(req))
//	for line in urllib.request.urlopen(f"{base}/v1/jobs/{job['id']}/progress"):
//	    print(json.loads(line))            # until "state" is done, failed or cancelled
//	tokens = pyarrow.ipc.open_stream(urllib.request.urlopen(f"{base}/v1/jobs/{job['id']}/tables/tokens")).read_all()
//	# read to its end: confirm, so that the engine counts it as fetched and keeps it for --keep only
//	urllib.request.urlopen(urllib.request.Request(f"{base}/v1/jobs/{job['id']}/tables/tokens/received", method="POST"))
//
// (polars: polars.from_arrow(tokens); a unix socket needs a client that dials one, such as
// requests-unixsocket, or `curl --unix-socket`.)
package kernel
