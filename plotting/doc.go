// Package plotting draws the figures a researcher looks at after a replay: logit-lens entropy by layer,
// a text strip shaded by surprise, the top-k alternatives at one position, AttnRes mixing weights and
// routed-expert usage. It reads the engine's Arrow tables by column name and draws with gonum/plot.
//
// # From tables to figures
//
// Each figure takes plain rows; the *Rows functions read them from the engine's record batches, by column
// name, and say which column is missing or has the wrong type:
//
//	res, err := c.Replay(ctx, kernel.Example("greeting"), kernel.LensAll()) // a kernel.Client c
//	lens, err := plotting.LensRows(res.Lens())                 // seq_id, pos, layer, entropy
//	fig, err := plotting.EntropyByLayer(lens, plotting.EntropyOptions{Seq: 0, Positions: []int32{3, 17, 42}})
//	fig.Display()                                              // in a GoNB cell: a PNG image
//	fig.WriteFile("entropy.png")                               // or .svg
//
// A cell that computes something of its own reads a column with Column, typed and by name, with an error
// in place of a type assertion's panic: plotting.Column[*array.FixedSizeList](res.Hidden(), "vector").
//
// A Figure renders as SVG (Figure.SVG) or PNG (Figure.PNG), sized for an 800-pixel notebook column.
// Figure.Plot is the gonum plot itself: change a title or an axis range before rendering.
//
// Display sends a PNG (image/png, at 1.5 times the density for sharp text), the one form every viewer of
// a notebook shows: Jupyter sanitises the HTML outputs of a notebook it does not trust (a fresh clone),
// as GitHub's notebook view does, so a plot sent as HTML collapses into its axis text there; image/svg+xml
// outputs are not rendered for an untrusted notebook either and nbconvert's HTML export strips them.
// DisplaySVG sends SVG as an image for those who want it.
//
// # The figures
//
//   - EntropyByLayer: one curve per chosen position (up to ten, of one sequence or, with Curves, of
//     several), entropy in nats against layer, ln V for reference with Vocab.
//     EntropyHeatmap: the same for every position at once, layer on y and position on x.
//   - LogprobStripFigure: the text of a sequence with each token shaded by its surprise (-logprob, read
//     from the row before it, which predicted it), as an image. LogprobStrip is the same as HTML, where
//     hovering a token shows its logprob, rank, entropy and top alternatives (DisplayHTML); an untrusted
//     notebook drops its shading.
//   - TopK and TopKAt: horizontal bars of the probabilities of the top-k next tokens at one position,
//     the token that actually came next in orange and marked, with its rank when outside the top k.
//   - AttnResHeatmap: each sublayer input (layer and site) against the block vectors it mixes, then the
//     partial sum of the current block; weights averaged over the chosen positions.
//   - CountExperts and ExpertUsageHeatmap: how many tokens chose each routed expert, per layer.
//
// LogprobStrip and TopKAt name the alternatives with the pieces the engine put in the tokens table
// (topk_tokens), so a cell needs no tokenizer; a decoder (StripOptions.Decode, TopKAt's decode) overrides
// them, and rows without pieces show ids. CountExperts takes the number of routed experts, which the
// engine reports (kernel/api Info.Experts).
//
// For a plot of your own, three tick markers label what gonum's defaults leave bare: LayerTicks every
// layer of an axis of layers (the default labels 0, 3 and 6 of eight), LinearTicks four to ten values
// of a linear axis (the default labels 0 and 25 of 0 to 27), and LogTicks a log axis (ranks,
// probabilities) beside plot.LogScale (gonum's plot.LogTicks labels only powers of ten, and an axis over
// ranks 200 to 840 would have no labels).
//
// Heatmaps share one viridis colour scale with a colour bar, and show cells without a value in grey.
// Bad input (nothing selected, lengths that disagree, ids out of range) is an error matching ErrInput; a
// missing or mistyped column matches ErrColumn. Nothing here panics: a panic inside gonum/plot while
// drawing comes back as an error.
package plotting
