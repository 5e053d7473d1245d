#!/usr/bin/env python3
"""Opens the tables `potato replay --out` wrote with pyarrow (and polars or DuckDB where installed), as
README.md tells a reader to: .arrow files with the IPC file reader, .arrows with the stream reader, .parquet
with the Parquet reader. Prints each table's rows, columns and provenance metadata; exits 1 on any failure.
Usage: arrow_readers_check.py DIR (the directory holding res.*.arrow, res.*.arrows, res.*.parquet)"""
import glob, os, sys

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

d = sys.argv[1]
failed = False
for path in sorted(glob.glob(os.path.join(d, "*"))):
    try:
        if path.endswith(".arrow"):
            t = ipc.open_file(path).read_all()  # random access: the IPC file format
        elif path.endswith(".arrows"):
            t = ipc.open_stream(path).read_all()
        elif path.endswith(".parquet"):
            t = pq.read_table(path)
        else:
            continue
        md = {k.decode(): v.decode() for k, v in (t.schema.metadata or {}).items()}
        keep = {k: md[k] for k in sorted(md) if k.startswith("potato.") and not k.endswith("request")}
        print(f"pyarrow {os.path.basename(path)}: {t.num_rows} rows, columns {t.column_names}; {keep}")
    except Exception as e:  # report every file, then fail
        failed = True
        print(f"pyarrow {os.path.basename(path)}: FAILED: {e}")
for name in ("polars", "duckdb"):
    try:
        mod = __import__(name)
    except ImportError:
        print(f"{name}: not installed here")
        continue
    for path in sorted(glob.glob(os.path.join(d, "*.arrow"))):
        try:
            if name == "polars":
                n = mod.read_ipc(path).height
            else:
                n = mod.sql(f"SELECT count(*) FROM read_parquet('{path[:-6]}.parquet')").fetchone()[0]
            print(f"{name} {os.path.basename(path)}: {n} rows")
        except Exception as e:
            failed = True
            print(f"{name} {os.path.basename(path)}: FAILED: {e}")
sys.exit(1 if failed else 0)
