// Package replay is the engine: it takes token sequences, gathers them into layer-major waves (every
// queued sequence goes through layer 0, then layer 1, ...; each layer's weights are read once per wave and
// the next layer's read overlaps the current compute), and returns per-token results.
package replay
