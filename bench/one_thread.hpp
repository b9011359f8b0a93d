#pragma once
// The benches that compare fusegrad with hand loops and eager measure one thread unless the
// environment asks otherwise: the hand loops run on one, and fusegrad splits tensors of 2^15
// elements and more over every core (the default where OpenMP is found), so a run that
// forgot `FUSEGRAD_NUM_THREADS=1` compared several cores with one. `FUSEGRAD_NUM_THREADS`,
// where set, still wins (bench_parallel sets its own counts and does not include this).
#include <cstdlib>

#include <fusegrad/core/parallel.hpp>

namespace fusegrad_bench {
inline const bool one_thread_unless_asked = [] {
  if (std::getenv("FUSEGRAD_NUM_THREADS") == nullptr) fusegrad::set_num_threads(1);
  return true;
}();
}  // namespace fusegrad_bench
