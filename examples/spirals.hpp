// Two interleaved spirals of `per_class` points each (r = t, angle = t + π k, with a little
// deterministic jitter): the data of the classifier examples.
#pragma once
#include <cmath>
#include <numbers>
#include <vector>

#include <fusegrad/eager.hpp>

struct spirals_data {
  fusegrad::tensor<float> x;              // [2 per_class, 2]
  std::vector<fusegrad::index_t> labels;  // 0 or 1
};

inline spirals_data make_spirals(int per_class = 200) {
  std::vector<float> xy;
  std::vector<fusegrad::index_t> labels;
  const auto jitter = fusegrad::randn<float>({2 * per_class, 2}, 3).to_vector();
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < per_class; ++i) {
      const double t = 0.5 + 3.5 * std::numbers::pi * i / per_class;
      const auto j = static_cast<std::size_t>(2 * (k * per_class + i));
      xy.push_back(static_cast<float>(t * std::cos(t + std::numbers::pi * k) / 6 + 0.02 * jitter[j]));
      xy.push_back(static_cast<float>(t * std::sin(t + std::numbers::pi * k) / 6 + 0.02 * jitter[j + 1]));
      labels.push_back(k);
    }
  return {fusegrad::from_vector<float>(xy, {2 * per_class, 2}), labels};
}
