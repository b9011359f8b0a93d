#pragma once
/// \file fusegrad/eager/print.hpp
/// `std::ostream << tensor`, in PyTorch's style: `tensor([1.0, 2.0], grad_fn=<AddBackward0>)`.

#include <ostream>

#include "fusegrad/eager/autograd.hpp"

namespace fusegrad {

template <Element T>
std::ostream& operator<<(std::ostream& os, const tensor<T>& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const std::vector<T> v = t.to_vector();
  const shape& s = t.shape();
  std::size_t k = 0;
  auto rec = [&](auto& self, std::size_t d) -> void {
    if (d == s.size()) {
      os << v[k++];
      return;
    }
    os << '[';
    for (index_t i = 0; i < s[d]; ++i) {
      if (i) os << ", ";
      if (s[d] > 12 && i == 6 && d + 1 == s.size()) {  // elide long rows
        os << "...";
        k += static_cast<std::size_t>(s[d] - 9);
        i = s[d] - 4;
        continue;
      }
      self(self, d + 1);
    }
    os << ']';
  };
  os << "tensor(";
  rec(rec, 0);
  if (t.grad_fn()) os << ", grad_fn=<" << t.grad_fn()->name() << '>';
  else if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace fusegrad
