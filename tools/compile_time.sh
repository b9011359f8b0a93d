#!/bin/sh
# Compile-time probes: user CPU seconds of `g++ -std=c++20 -O2 -mavx2 -mfma -c` for the
# probe TUs in tools/compile_time/ and tests/test_compile_40.cpp, median of $REPS runs.
#   tools/compile_time.sh [include-dir]     (default: ./include)
# Compare two trees in the same run (timings on shared machines drift by 1.3x or more).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
inc=${1:-$root/include}
reps=${REPS:-3}
for f in "$root"/tools/compile_time/headers.cpp "$root"/tools/compile_time/eager40.cpp \
         "$root"/tools/compile_time/analysis40.cpp "$root"/tools/compile_time/compiled40.cpp \
         "$root"/tests/test_compile_40.cpp; do
  times=""
  i=0
  while [ "$i" -lt "$reps" ]; do
    t=$( { /usr/bin/time -f "%U" g++ -std=c++20 -O2 -mavx2 -mfma -I"$inc" -c "$f" -o /dev/null; } 2>&1 | tail -n 1)
    times="$times $t"
    i=$((i + 1))
  done
  med=$(echo $times | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
  printf '%-22s %6s s   (runs:%s)\n' "$(basename "$f")" "$med" "$times"
done
