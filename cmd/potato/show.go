package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/tables"
)

func init() {
	commands["show"] = command{"print a result table's columns, provenance and first rows (.arrow, .arrows, .parquet)", runShow}
}

// runShow parses `potato show [--rows N] FILE...`: for a researcher without pyarrow or a Go program at
// hand, what a written table holds, read by the same code that reads it in Go (tables.ReadFile).
func runShow(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("show", "usage: potato show [--rows N] [--width N] FILE.tokens.arrow|.arrows|.parquet ...\n\n"+
		"Prints each table's name, rows, columns and types, its potato.* provenance and its first rows.\n"+
		"Flags may come before or after the files.\n")
	rows := fs.Int("rows", 10, "rows printed from the top of each table (0: none)")
	width := fs.Int("width", 60, "characters a cell is cut to")
	files, err := parseInterspersed(fs, args, stdout) // show r.tokens.arrow --rows 1 read --rows as a file
	if err != nil {
		return err
	}
	switch {
	case len(files) == 0:
		return usagef("show", "show: give one or more table files")
	case *rows < 0:
		return fmt.Errorf("show: --rows %d is negative (0: no rows)", *rows)
	case *width < 4:
		return fmt.Errorf("show: --width %d: a cell needs at least 4 characters", *width)
	}
	for i, path := range files {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := showTable(stdout, path, *rows, *width); err != nil {
			return fmt.Errorf("show: %w", err)
		}
	}
	return nil
}

// showTable prints one table file. A directory (a dataset job's, most often) is refused with the table
// files it holds, the first few named: show reads files, and the directory's own message from the table
// reader ("unknown extension") did not say where to look.
func showTable(w io.Writer, path string, rows, width int) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return dirOfTables(path)
	}
	t, err := tables.ReadFile(path, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	defer t.Release()
	name := t.Name
	if name == "" {
		name = tables.TableName(t.Schema)
	}
	fmt.Fprintf(w, "%s: table %s, %s rows\n", path, name, numtext.Commas(t.NumRows()))
	md := t.Schema.Metadata()
	for i, k := range md.Keys() {
		if strings.HasPrefix(k, "potato.") {
			fmt.Fprintf(w, "  %s = %s\n", k, md.Values()[i])
		}
	}
	fields := t.Schema.Fields()
	var cols []string
	for _, f := range fields {
		cols = append(cols, f.Name+" "+f.Type.String())
	}
	fmt.Fprintf(w, "  columns: %s\n", strings.Join(cols, ", "))
	if rows == 0 || t.NumRows() == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	fmt.Fprintln(tw, strings.Join(names, "\t"))
	shown := 0
	for _, rec := range t.Records {
		for r := 0; r < int(rec.NumRows()) && shown < rows; r++ {
			cells := make([]string, len(fields))
			for c := range fields {
				cells[c] = cell(rec.Column(c), r, width)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
			shown++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if left := t.NumRows() - int64(shown); left > 0 {
		noun := "rows"
		if left == 1 {
			noun = "row"
		}
		fmt.Fprintf(w, "... %s more %s (--rows N)\n", numtext.Commas(left), noun)
	}
	return nil
}

// cell is one value as Arrow prints it, on one line (tabs and newlines escaped), cut to width characters.
func cell(col arrow.Array, r, width int) string {
	if col.IsNull(r) {
		return "null"
	}
	s := strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(col.ValueStr(r))
	if rs := []rune(s); len(rs) > width {
		s = string(rs[:width-1]) + "…"
	}
	return s
}

// dirOfTables is show's error for a directory: the table files in it (a dataset job's parts), the first
// few named, and the command for the first.
func dirOfTables(dir string) error {
	var files []string
	for _, pat := range []string{"*.parquet", "*.arrow", "*.arrows"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat)) // only a malformed pattern fails
		files = append(files, m...)
	}
	slices.Sort(files)
	if len(files) == 0 {
		return fmt.Errorf("%s is a directory and holds no table files (.parquet, .arrow, .arrows): show takes table files", dir)
	}
	const named = 4
	names := make([]string, 0, named)
	for _, f := range files[:min(named, len(files))] {
		names = append(names, filepath.Base(f))
	}
	list := strings.Join(names, ", ")
	if len(files) > named {
		list += fmt.Sprintf(" and %d more", len(files)-named)
	}
	return fmt.Errorf("%s is a directory: show takes table files; it holds %d: %s (potato show %s)", dir, len(files), list, files[0])
}
