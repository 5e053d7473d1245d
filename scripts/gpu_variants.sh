#!/usr/bin/env bash
# Several builds checked and timed in one device call: tests and benches of each variant, in the order a
# plan file gives, so that a change is measured beside its baseline on the same machine (machines differ
# by 1-3% between calls). Build here first, gzipped, one folder a variant, and carry the folders:
#   .dev/<variant>/cuda.test.gz, replay.test.gz (go test -c ./cuda, ./replay), potato.gz (./cmd/potato); or
#   .xz (xz -9: a potato binary 12 MB instead of gzip's 16; a call carries 64 MiB with the tree), or all
#   of them in .dev/bundle.tar.xz (VARIANT/FILE, unpacked: two potato builds pack to about 13 MB)
# PLAN (a file, one step a line; # starts a comment):
#   test VARIANT PKG LIMIT PATTERN [ARGS...]   PKG's test binary of VARIANT with -test.run PATTERN (add
#                                              -test.short among ARGS to skip the timing tests)
#   bench VARIANT STEP [FLAGS...]              scripts/gpu_slice_check.sh's STEP (prof_262k, ...) with the
#                                              variant's potato and FLAGS added to the bench's; the
#                                              k3-layer model is written once
#   if-passed VARIANT PKG                      skip the rest of the plan's lines up to "end" unless that
#   end                                        variant's PKG tests all passed so far
#   if-gpu PATTERN ... end                     skip up to "end" unless the GPU's name (nvidia-smi) matches
#   if-gpu !PATTERN ... end                    the grep -E PATTERN, or with ! unless it does not: a call
#                                              that asks for an H200 and is given an H100 runs another
#                                              plan, or nothing, and costs only the machine's start
# DEADLINE (default 585) bounds the whole call. Writes $OUT/steps.txt, $OUT/summary.txt, every TIMING line
# tagged with its variant ($OUT/timing.txt), and each step's log and bench folder packed into
# $OUT/logs.tgz: the device tool returns at most eight files from a call (runs 79-81 lost some).
set -uo pipefail
OUT=${OUT:-/tmp/out}
PLAN=${PLAN:?PLAN: a plan file}
DEADLINE=${DEADLINE:-585}
mkdir -p "$OUT"
rm -rf /tmp/variants && mkdir -p /tmp/variants # a warm machine keeps /tmp: never run an earlier call's binary
ROOT=$(pwd)
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }
# .dev/bundle.tar.xz, when there, holds VARIANT/FILE for several variants in one archive: builds of one
# tree differ little, so xz packs a second binary beside the first in a fraction of its size.
if [[ -f .dev/bundle.tar.xz ]]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .dev/bundle.tar.xz /tmp/variants/bundle
fi
# bin VARIANT FILE: the unpacked binary's path
bin() {
  local p=/tmp/variants/$1.$2
  if [[ ! -x $p ]]; then
    if [[ -f /tmp/variants/bundle/$1/$2 ]]; then
      cp "/tmp/variants/bundle/$1/$2" "$p" || return 1
    elif [[ -f .dev/$1/$2.gz ]]; then
      gunzip -c ".dev/$1/$2.gz" > "$p" || return 1
    elif [[ -f .dev/$1/$2.xz ]]; then # python's lzma where xz is not installed
      xz -dc ".dev/$1/$2.xz" > "$p" 2>/dev/null ||
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' ".dev/$1/$2.xz" > "$p" || return 1
    else
      return 1
    fi
    chmod +x "$p" || return 1
  fi
  echo "$p"
}
declare -A failed
n=0
skip=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
while read -r kind v rest; do
  [[ -z ${kind:-} || $kind == \#* ]] && continue
  if [[ $kind == end ]]; then skip=0; continue; fi
  (( skip )) && continue
  n=$((n + 1))
  case $kind in
  test)
    read -r pkg lim pat args <<< "$rest"
    b=$(bin "$v" "$pkg.test") || { log "$v: no $pkg.test"; failed[$v.$pkg]=1; continue; }
    (( lim > $(left) )) && lim=$(left)
    if (( lim < 20 )); then log "SKIPPED $v $pkg $pat (no time left)"; continue; fi
    log "$v $pkg.test -test.run '$pat' $args (limit ${lim}s)"
    # a test binary runs in its package's directory; the cuda package's from the variant's own kernel
    # sources where the bundle has them (scripts/gpu_bundle.sh: the kernel-file tests read them there)
    dir=$ROOT/$pkg
    if [[ $pkg == cuda && -d /tmp/variants/bundle/$v/cuda-dir/kernels ]]; then
      dir=/tmp/variants/bundle/$v/cuda-dir
    fi
    # shellcheck disable=SC2086
    (cd "$dir" && timeout "$lim" "$b" -test.v -test.run "$pat" $args > "$OUT/${n}_${v}_$pkg.log" 2>&1)
    rc=$?
    log "$v $pkg exit $rc ($(grep -c -- '--- PASS' "$OUT/${n}_${v}_$pkg.log") passed, $(grep -c -- '--- FAIL' "$OUT/${n}_${v}_$pkg.log") failed)"
    (( rc != 0 )) && failed[$v.$pkg]=1
    { echo "== $n: $v $pkg '$pat' exit $rc"; grep -E -- "--- FAIL|^FAIL|^ok|panic|differ" "$OUT/${n}_${v}_$pkg.log" | head -30; } >> "$OUT/summary.txt"
    grep -E "TIMING" "$OUT/${n}_${v}_$pkg.log" | sed "s/^/$v: /" >> "$OUT/timing.txt"
    ;;
  bench)
    b=$(bin "$v" potato) || { log "$v: no potato"; continue; }
    mkdir -p "/tmp/variants/$v.dev"
    ln -sf "$b" "/tmp/variants/$v.dev/potato"
    read -r stepname flags <<< "$rest"
    log "$v bench $rest"
    OUT="$OUT/bench_${n}_$v" DEV="/tmp/variants/$v.dev" STEPS="$stepname" EXTRA="${flags:-}" DEADLINE=$(left) \
      bash "$ROOT/scripts/gpu_slice_check.sh" > /dev/null 2>&1
    { echo "== $n: $v bench $rest"; cat "$OUT/bench_${n}_$v/summary.txt" 2>/dev/null; } >> "$OUT/summary.txt"
    log "$v bench $rest done"
    ;;
  if-passed)
    if [[ -n ${failed[$v.$rest]:-} ]]; then log "skipping to end: $v $rest failed"; skip=1; fi
    ;;
  if-gpu)
    # the step's first word is the pattern here (read put it in v)
    want=1 pat=$v
    if [[ $pat == !* ]]; then want=0 pat=${pat#!}; fi
    got=0
    grep -qE -- "$pat" "$OUT/gpu.txt" && got=1
    if (( got != want )); then log "skipping to end: the GPU ($(cut -d, -f1 "$OUT/gpu.txt")) is not what 'if-gpu $v' asks"; skip=1; fi
    ;;
  *) log "plan: unknown step '$kind'" ;;
  esac
done < "$PLAN"
log done
# pack everything but the three summaries into one archive (unpack with tar xzf logs.tgz)
pack=$(mktemp -d)
find "$OUT" -mindepth 1 -maxdepth 1 ! -name steps.txt ! -name summary.txt ! -name timing.txt -exec mv {} "$pack"/ \;
# by name, not ".": an archive whose first entry is "./" gives the folder it is unpacked into the mode of
# mktemp's (0700); unpacked into /tmp as root, that locked every other user out of /tmp (munge's, in the
# Slurm test)
(cd "$pack" && tar czf "$OUT/logs.tgz" -- *) && rm -rf "$pack"
