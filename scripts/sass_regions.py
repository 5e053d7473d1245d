#!/usr/bin/env python3
"""Sums an Nsight Compute SASS export (scripts/gpu_ncu.sh's NAME_sass.csv.gz) by region and by opcode.

A region runs from one barrier (BAR.SYNC) to the next, so in a kernel whose phases end at
__syncthreads each region is a phase: its share of the executed warp instructions and of the stall
samples says where the time goes. Usage: sass_regions.py FILE.csv.gz [UNITS] [FIRST LAST]
  UNITS      divide instruction counts by it (e.g. a launch's blocks x loop trips: counts per trip)
  FIRST LAST also list the region's opcodes between these SASS line numbers (0-based)
"""
import collections
import csv
import gzip
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
    hdr, data = rows[1], rows[2:]
    src = hdr.index("Source")
    samp = hdr.index("Warp Stall Sampling (All Samples)")
    execd = hdr.index("Instructions Executed")
    units = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    num = lambda r, i: int(r[i] or 0)
    tot_s = sum(num(r, samp) for r in data) or 1
    tot_e = sum(num(r, execd) for r in data) or 1
    print(f"{len(data)} SASS instructions, {tot_e / units:.0f} executed, {tot_s} stall samples")
    start = 0
    for i, r in enumerate(data):
        ins = r[src].strip()
        if i == len(data) - 1 or ("BAR" in ins and "SYNC" in ins):
            part = data[start : i + 1]
            s = sum(num(x, samp) for x in part)
            e = sum(num(x, execd) for x in part)
            if s / tot_s > 0.005 or e / tot_e > 0.005:
                print(f"  lines {start:5d}-{i:5d}: {100 * e / tot_e:5.1f}% of instructions "
                      f"({e / units:.0f}), {100 * s / tot_s:5.1f}% of samples; ends {ins[:40]}")
            start = i + 1
    lo, hi = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (0, len(data) - 1)
    ops, smp = collections.Counter(), collections.Counter()
    for r in data[lo : hi + 1]:
        words = r[src].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
        ops[op] += num(r, execd)
        smp[op] += num(r, samp)
    print(f"opcodes of lines {lo}-{hi} (executed / units, stall samples):")
    for op, e in ops.most_common(24):
        print(f"  {op:10s} {e / units:12.0f} {smp[op]:10d}")


if __name__ == "__main__":
    main()
