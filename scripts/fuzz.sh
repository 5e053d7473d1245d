#!/usr/bin/env bash
# Runs every fuzz target of the project for a bounded time each (FUZZTIME, default 5s; CI uses the
# default, run longer locally: FUZZTIME=10m scripts/fuzz.sh). New crashers land in the package's
# testdata/fuzz/ directory: commit them with the fix, and `go test ./...` replays them from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-5s}
# Go minimizes every input that finds new coverage before it fuzzes on, for up to 60 s by default; on
# structured inputs of kilobytes (Parquet files) that took nearly all of the time (and those runs are not
# counted in the execs it prints). A crasher is still written, minimized as far as the time allowed.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-1s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz $pkg $target ($FUZZTIME)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" >/tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; exit 1; }
    grep 'execs:' /tmp/fuzz.$$.log | tail -1 || true
  done
done
