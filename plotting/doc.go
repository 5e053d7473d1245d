// Package plotting draws the figures a researcher looks at after a replay: logit-lens entropy by layer,
// a text strip shaded by surprise, the top-k alternatives at one position, AttnRes mixing weights and
// routed-expert usage. It reads the engine's Arrow tables by column name and draws with gonum/plot.
//
// # From tables to figures
//
// Each figure takes plain rows; the *Rows functions read them from the engine's record batches, by column
// name, and say which column is missing or has the wrong type:
//
//	lens, err := plotting.LensRows(result.Lens...)             // seq_id, pos, layer, entropy
//	fig, err := plotting.EntropyByLayer(lens, plotting.EntropyOptions{Seq: 0, Positions: []int32{3, 17, 42}})
//	fig.Display()                                              // in a GoNB cell
//	fig.WriteFile("entropy.png")                               // or .svg
//
// A Figure renders as SVG (Figure.SVG) or PNG (Figure.PNG), sized for an 800-pixel notebook column.
// Figure.Plot is the gonum plot itself: change a title or an axis range before rendering.
//
// # The figures
//
//   - EntropyByLayer: one curve per chosen position (up to ten), entropy in nats against layer.
//     EntropyHeatmap: the same for every position at once, layer on y and position on x.
//   - LogprobStrip: HTML, not a plot. The text of a sequence with each token shaded by its surprise
//     (-logprob, read from the row before it, which predicted it); hover a token for its logprob, rank,
//     entropy and top alternatives. Show it with DisplayHTML.
//   - TopK and TopKAt: horizontal bars of the probabilities of the top-k next tokens at one position,
//     the token that actually came next in orange.
//   - AttnResHeatmap: each sublayer input (layer and site) against the block vectors it mixes, then the
//     partial sum of the current block; weights averaged over the chosen positions.
//   - CountExperts and ExpertUsageHeatmap: how many tokens chose each routed expert, per layer.
//
// LogprobStrip and TopKAt name the alternatives with the pieces the engine put in the tokens table
// (topk_tokens), so a cell needs no tokenizer; a decoder (StripOptions.Decode, TopKAt's decode) overrides
// them, and rows without pieces show ids. CountExperts takes the number of routed experts, which the
// engine reports (kernel/api Info.Experts).
//
// Heatmaps share one viridis colour scale with a colour bar, and show cells without a value in grey.
// Bad input (nothing selected, lengths that disagree, ids out of range) is an error matching ErrInput; a
// missing or mistyped column matches ErrColumn. Nothing here panics: a panic inside gonum/plot while
// drawing comes back as an error.
package plotting
