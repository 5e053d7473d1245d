#!/usr/bin/env bash
# Runs every fuzz target of the project for a bounded time each (FUZZTIME, default 5s; CI uses the
# default, run longer locally: FUZZTIME=10m scripts/fuzz.sh). New crashers land in the package's
# testdata/fuzz/ directory: commit them with the fix, and `go test ./...` replays them from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-5s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz $pkg $target ($FUZZTIME)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" >/tmp/fuzz.$$.log 2>&1 || { cat /tmp/fuzz.$$.log; exit 1; }
  done
done
