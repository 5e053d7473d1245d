// Package tables turns replay results into Apache Arrow tables (tokens, lens, hidden, router, attnres) and
// writes and reads them as Arrow IPC streams and Parquet files.
package tables
