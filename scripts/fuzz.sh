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
# fuzz PKG TARGET: one bounded run. A real failure writes its input under testdata/fuzz/ ("Failing input
# written to"). Go's fuzzing engine can also end a run with a bare "context deadline exceeded" when the
# time runs out while it is minimizing an input (no input is failing then): that one is retried once and
# then reported as a warning, so a flake of the harness does not fail CI while a crasher always does.
fuzz() {
  local log=/tmp/fuzz.$$.log
  for attempt in 1 2; do
    if go test "$1" -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" >"$log" 2>&1; then
      grep 'execs:' "$log" | tail -1 || true
      return 0
    fi
    if grep -q 'Failing input written' "$log" || ! grep -q 'context deadline exceeded' "$log"; then
      cat "$log"
      return 1
    fi
    echo "warning: $2 ended with the fuzzing engine's 'context deadline exceeded' and no failing input (attempt $attempt)"
  done
  return 0
}

grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz $pkg $target ($FUZZTIME)"
    fuzz "$pkg" "$target" || exit 1
  done
done
