#!/bin/sh
# Compile time of user TUs as a ratio to the floor (tools/compile_time/floor.cpp: only the
# standard headers and xsimd that fusegrad includes), issue 17's measure: user CPU seconds of
# `g++ -std=c++20 -O2 -mavx2 -mfma -c`, header-only and with the precompiled runtime
# (-DFUSEGRAD_PRECOMPILED), the minimum over $ROUNDS rounds (default 2) in which the TUs
# alternate, so that a slow spell of a shared machine hits all of them.
#   tools/compile_ratios.sh [include-dir]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
inc=${1:-$root/include}
rounds=${ROUNDS:-2}
cxx="g++ -std=c++20 -O2 -mavx2 -mfma -I$inc"
tus="tools/compile_time/floor.cpp examples/quickstart.cpp tests/test_compile_40.cpp examples/walkthrough.cpp"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
r=0
while [ "$r" -lt "$rounds" ]; do
  for mode in header-only runtime; do
    flags=""
    [ "$mode" = runtime ] && flags="-DFUSEGRAD_PRECOMPILED"
    for tu in $tus; do
      t=$( { /usr/bin/time -f "%U" $cxx $flags -c "$root/$tu" -o /dev/null; } 2>&1 | tail -n 1)
      echo "$t" >> "$out/$mode.$(basename "$tu" .cpp)"
    done
  done
  r=$((r + 1))
done
min() { sort -n "$1" | head -n 1; }
printf '%-22s %12s %8s %12s %8s\n' TU header-only ratio runtime ratio
for tu in $tus; do
  n=$(basename "$tu" .cpp)
  h=$(min "$out/header-only.$n"); p=$(min "$out/runtime.$n")
  hf=$(min "$out/header-only.floor"); pf=$(min "$out/runtime.floor")
  awk -v n="$n" -v h="$h" -v hf="$hf" -v p="$p" -v pf="$pf" \
    'BEGIN { printf "%-22s %10.2f s %7.2fx %10.2f s %7.2fx\n", n, h, h / hf, p, p / pf }'
done
