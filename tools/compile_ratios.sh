#!/bin/sh
# Compile time of user TUs as a ratio to the floor (tools/compile_time/floor.cpp: only the
# standard headers and xsimd that fusegrad includes), each TU compiled with the command a
# consumer project's Release build gives it (CMake: -O3 -DNDEBUG -std=c++20, and what the
# target adds), in three ways:
#   default      fusegrad::fusegrad: -DFUSEGRAD_PRECOMPILED and the runtime's -mavx2 -mfma
#   pch          the same, with fusegrad_precompile_headers() (fusegrad.hpp precompiled; the
#                time of a TU that uses it, not of building it once per target)
#   header-only  fusegrad::header_only: -fopenmp, and the user's own flags (none here)
# User CPU seconds, the minimum over $ROUNDS rounds (default 2) in which the TUs alternate, so
# that a slow spell of a shared machine hits all of them. The floor is compiled each way too.
#   tools/compile_ratios.sh
#   ROOT=<another checkout> MODES=header-only tools/compile_ratios.sh   (its TUs and headers; a
#   TU it lacks is skipped: how an older commit compares)
set -eu
root=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
inc=$root/include
rounds=${ROUNDS:-2}
modes=${MODES:-default pch header-only}
cxx="g++ -O3 -DNDEBUG -std=c++20 -I$inc -I$root/tests"
default_flags="-DFUSEGRAD_PRECOMPILED -mavx2 -mfma"
header_only_flags="-fopenmp"
tus=""
for tu in tools/compile_time/floor.cpp examples/quickstart.cpp tests/compile/test_compile_40.cpp examples/walkthrough.cpp \
          examples/jit.cpp examples/custom_op_paths.cpp; do
  [ -f "$root/$tu" ] && tus="$tus $tu"
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The precompiled header, built once as CMake builds it for a target.
printf '#include <fusegrad/fusegrad.hpp>\n' > "$out/pch.hpp"
case " $modes " in *" pch "*) $cxx $default_flags -x c++-header "$out/pch.hpp" -o "$out/pch.hpp.gch" ;; esac
r=0
while [ "$r" -lt "$rounds" ]; do
  for mode in $modes; do
    case $mode in
      default) flags=$default_flags ;;
      pch) flags="$default_flags -Winvalid-pch -include $out/pch.hpp" ;;
      header-only) flags=$header_only_flags ;;
    esac
    for tu in $tus; do
      f=$flags
      # the floor never includes fusegrad: no precompiled header for it
      [ "$mode" = pch ] && [ "$tu" = tools/compile_time/floor.cpp ] && f=$default_flags
      t=$( { /usr/bin/time -f "%U" $cxx $f -c "$root/$tu" -o /dev/null; } 2>&1 | tail -n 1)
      echo "$t" >> "$out/$mode.$(basename "$tu" .cpp)"
    done
  done
  r=$((r + 1))
done
min() { sort -n "$1" | head -n 1; }
printf '%-18s' TU
for mode in $modes; do printf ' %16s' "$mode"; done
echo
for tu in $tus; do
  n=$(basename "$tu" .cpp)
  line=$(printf '%-18s' "$n")
  for mode in $modes; do
    t=$(min "$out/$mode.$n"); fl=$(min "$out/$mode.floor")
    line="$line$(awk -v t="$t" -v f="$fl" 'BEGIN { printf " %6.2f s %5.2fx", t, t / f }')"
  done
  echo "$line"
done
