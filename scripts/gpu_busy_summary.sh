#!/usr/bin/env bash
# gpu_busy_summary.sh FILE: one line on how the GPU ran while it was busy, from nvidia-smi samples (one a
# line: memory.used, clocks.sm, power.draw, temperature.gpu, utilization.gpu; csv, noheader, nounits), as
# scripts/gpu_slice_check.sh records them beside each step. Under load the H200 sits at its 700 W cap and
# its SM clock follows the power and the temperature, and one machine's waves have drifted by 2% within a
# call (docs/records/run122): this line lets a record say whether a slower wave ran at a lower clock.
# Busy: utilization at least 90%. Medians and the range of the SM clock and the power, the temperature's
# range; samples that are not numbers ([N/A]) are left out.
set -uo pipefail
python3 - "$1" <<'PY'
import statistics, sys
rows = []
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError as e:
    print(f"GPU busy: no samples ({e.strerror})")
    sys.exit(0)
for line in lines:
    f = [x.strip() for x in line.split(",")]
    if len(f) < 5:
        continue
    try:
        clk, pw, temp, util = float(f[1]), float(f[2]), float(f[3]), float(f[4])
    except ValueError:
        continue
    if util >= 90:
        rows.append((clk, pw, temp))
if not rows:
    print(f"GPU busy: no samples at 90% utilization or more (of {len(lines)})")
    sys.exit(0)
clk, pw, temp = zip(*rows)
print(f"GPU busy ({len(rows)} samples of {len(lines)}, 100 ms apart): SM clock median {statistics.median(clk):.0f} MHz"
      f" ({min(clk):.0f}-{max(clk):.0f}), power median {statistics.median(pw):.0f} W ({min(pw):.0f}-{max(pw):.0f}),"
      f" temperature {min(temp):.0f}-{max(temp):.0f} C")
PY
