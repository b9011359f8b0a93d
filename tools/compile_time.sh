#!/bin/sh
# Compile-time probes: user CPU seconds of `g++ -std=c++20 -O2 -mavx2 -mfma -c` for the
# probe TUs in tools/compile_time/ and tests/compile/test_compile_40.cpp, median of $REPS runs, in
# three builds:
#   header-only   the default: the TU instantiates everything it uses
#   runtime       -DFUSEGRAD_PRECOMPILED: what linking fusegrad::fusegrad gives (the generic
#                 runtime is extern, see include/fusegrad/runtime.hpp)
#   runtime+pch   the same with the precompiled header the tests use (<doctest/doctest.h>,
#                 <fusegrad/fusegrad.hpp>; built once here, its build time is not counted)
#   tools/compile_time.sh [include-dir]     (default: ./include)
# Compare two trees in the same run (timings on shared machines drift by 1.3x or more).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
inc=${1:-$root/include}
reps=${REPS:-3}
cxx="g++ -std=c++20 -O2 -mavx2 -mfma -I$inc"
pch=$(mktemp -d)
trap 'rm -rf "$pch"' EXIT
printf '#include <doctest/doctest.h>\n#include <fusegrad/fusegrad.hpp>\n' > "$pch/pch.hxx"
$cxx -DFUSEGRAD_PRECOMPILED -x c++-header "$pch/pch.hxx" -o "$pch/pch.hxx.gch"

median() {  # runs "$@" $reps times, prints the median user time and the runs
  times=""
  i=0
  while [ "$i" -lt "$reps" ]; do
    t=$( { /usr/bin/time -f "%U" "$@" -o /dev/null; } 2>&1 | tail -n 1)
    times="$times $t"
    i=$((i + 1))
  done
  med=$(echo $times | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
  printf '%6s s (runs:%s)' "$med" "$times"
}

printf '%-22s %-34s %-34s %s\n' probe header-only runtime runtime+pch
for f in "$root"/tools/compile_time/headers.cpp "$root"/tools/compile_time/eager40.cpp \
         "$root"/tools/compile_time/analysis40.cpp "$root"/tools/compile_time/compiled40.cpp \
         "$root"/tests/compile/test_compile_40.cpp; do
  printf '%-22s ' "$(basename "$f")"
  median $cxx -c "$f"
  printf '   '
  median $cxx -DFUSEGRAD_PRECOMPILED -c "$f"
  printf '   '
  median $cxx -DFUSEGRAD_PRECOMPILED -Winvalid-pch -include "$pch/pch.hxx" -c "$f"
  printf '\n'
done
