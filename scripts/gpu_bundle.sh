#!/usr/bin/env bash
# Builds the binaries of one or more variants for a device call into .dev/bundle.tar.xz, the form
# scripts/gpu_variants.sh unpacks (VARIANT/potato, VARIANT/cuda.test, VARIANT/replay.test): builds of one
# tree differ little, so xz packs a second variant beside the first in a fraction of its size, and a call
# carries at most 64 MiB with the working tree. Stripped (-s -w: no symbol table or DWARF, stack traces
# still named): a variant's three binaries pack to about 15 MiB, against 44 unstripped.
#   scripts/gpu_bundle.sh h=HEAD               the code as committed (a git worktree: uncommitted edits
#                                              are not in it)
#   scripts/gpu_bundle.sh h=HEAD b=abc1234     two variants, for an A/B plan
#   scripts/gpu_bundle.sh w=.                  the working tree as it is, uncommitted edits included
#   BINS=potato scripts/gpu_bundle.sh ...      only these binaries (default: potato cuda.test replay.test):
#                                              benches alone need potato, and two variants' three binaries
#                                              with a 40 MiB tree were refused as past 64 MiB
# Then run, on the device: DEADLINE=... PLAN=... bash scripts/gpu_variants.sh (carry .dev/bundle.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
(( $# > 0 )) || { sed -n '2,10p' "$0" >&2; exit 2; }
stage=$(mktemp -d /tmp/potato-bundle.XXXXXX)
trees=()
cleanup() {
  for t in "${trees[@]}"; do git -C "$root" worktree remove --force "$t" 2>/dev/null || true; done
  rm -rf "$stage"
}
trap cleanup EXIT
for spec in "$@"; do
  name=${spec%%=*} rev=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9_-]+$ && $spec == *=* ]] || { echo "gpu_bundle: $spec: want NAME=REV (or NAME=. for the working tree)" >&2; exit 2; }
  src=$root
  if [[ $rev != . ]]; then
    src=$stage/src-$name
    git worktree add -q --detach "$src" "$rev"
    trees+=("$src")
  fi
  out=$stage/bundle/$name
  mkdir -p "$out"
  edits=
  if [[ $rev == . ]] && ! git -C "$src" diff --quiet HEAD; then edits=", uncommitted edits"; fi
  echo "gpu_bundle: $name = $rev ($(git -C "$src" rev-parse --short HEAD)$edits)"
  for b in ${BINS:-potato cuda.test replay.test}; do
    case $b in
    potato) (cd "$src" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$out/potato" ./cmd/potato) ;;
    *.test) (cd "$src" && CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$out/$b" "./${b%.test}") ;;
    *) echo "gpu_bundle: BINS: $b is not potato or PKG.test" >&2; exit 2 ;;
    esac
  done
  # the variant's kernel sources and test files: cuda.test's kernel-file tests read them from its working
  # directory, which scripts/gpu_variants.sh makes of them (run 129 compared a branch's binary with main's)
  mkdir -p "$out/cuda-dir" && cp -r "$src/cuda/kernels" "$src/cuda/testdata" "$out/cuda-dir/"
done
mkdir -p .dev
(cd "$stage/bundle" && tar -cf - -- *) | xz -9e -T2 > .dev/bundle.tar.xz.tmp
mv .dev/bundle.tar.xz.tmp .dev/bundle.tar.xz
size=$(stat -c %s .dev/bundle.tar.xz)
# What travels with a call: the tracked and the untracked-not-ignored files, and what it carries.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
echo "gpu_bundle: .dev/bundle.tar.xz, $((size / 1024 / 1024)) MiB; with the working tree ($((tree / 1024 / 1024)) MiB) $(((size + tree) / 1024 / 1024)) MiB of a call's 64"
# the device tool counts more than these files (a bundle of 62 MiB by this sum was refused): keep 3 MiB spare
if (( size + tree > 61 * 1024 * 1024 )); then
  echo "gpu_bundle: over the 64 MiB a call carries, less a margin: fewer variants, or fewer binaries a variant (BINS=potato)" >&2
  exit 1
fi
