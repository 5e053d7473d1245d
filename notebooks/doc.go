// Package notebooks holds the project's GoNB notebooks, checked in with their outputs so that they read
// well on a code host before anyone runs them:
//
//   - quickstart.ipynb: connect (the embedded default engine starts in the background), replay a bundled
//     conversation, the tokens table inline, a strip of the text shaded by surprise, and a statistic
//     computed from the Arrow columns.
//   - entropy_per_layer.ipynb: the logit lens at every layer; entropy curves for a few positions, the layer
//     x position heatmap, and a check that the last layer's readout is the model's own output.
//   - hidden_states.ipynb: hidden states at chosen layers, and the L2 norm per layer and channel computed
//     from the Arrow hidden table and plotted with gonum/plot.
//   - routing_and_attnres.ipynb: routed-expert usage per layer, AttnRes mixing weights, and the top-k
//     alternatives at one position.
//
// The package has no Go code of its own: its test executes every notebook headless, in a fresh GoNB
// kernel each, against the embedded default model written fresh into a temporary cache:
//
//	go test ./notebooks            # fails on any cell error, or a cell whose outputs changed kind
//	go test ./notebooks -update    # the same, then writes the executed notebooks back (commit them)
//
// It needs jupyter nbconvert (Debian: apt-get install jupyter-nbconvert python3-nbclient jupyter-client),
// and gonb and goimports on PATH (`go run ./cmd/potato notebook install` puts them there), and every
// module go.mod pins in the module cache (the runs are offline; the install fetches them). Without them
// the test skips, saying what is missing, unless POTATO_REQUIRE_NOTEBOOKS=1 (as in CI), where it fails.
//
// Every cell is compiled and run as its own program, so a notebook keeps no values between cells, only
// declarations; the state lives in the resident engine that kernel.Connect starts on first use, and
// kernel's ReplayCached reads a repeated request's result back from disk. Each notebook's first cell
// turns GoNB's auto-get off (%noautoget), so cells build offline against the versions go.mod pins.
//
// The test runs the set-up README gives (potato notebook install, into a private Jupyter directory),
// with GOPROXY=off and GOTOOLCHAIN=local: a cell that would fetch a module fails. It builds the potato
// command once and hands it to the kernel as $POTATO_BIN, and stops the background engine after each
// notebook, so that every notebook also starts one; every process a run started (kernels, cells, potato
// serve) is stopped when the notebook ends, and the runs keep inside go test's -timeout less a minute.
// Each executed notebook must carry an image/png output in every cell that shows a plot, and is also
// rendered to HTML with nbconvert: every plot an embedded PNG, no error output, the code highlighted as
// Go (the test sets the notebooks' language_info for nbconvert).
package notebooks
