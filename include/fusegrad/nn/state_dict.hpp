#pragma once
/// \file fusegrad/nn/state_dict.hpp
/// Saving and loading named parameters (`nn::save`, `nn::load`) in a file NumPy reads: a
/// sequence of `.npy` records (format 1.0, little-endian, C order). The first record is a
/// uint8 vector of the names, UTF-8, joined by '\n'; then one array per name, in order, of
/// dtype '<f4' (float) or '<f8' (double):
///
///     with open(path, "rb") as f:
///         names = np.load(f).tobytes().decode().split("\n")
///         params = {name: np.load(f) for name in names}
///
/// `load` copies into existing tensors (no gradient recorded) and checks names, order, shapes
/// and the element type; any mismatch or a malformed file is a `fusegrad::error` naming it.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::nn {

template <Element T>
using named_tensors = std::vector<std::pair<std::string, tensor<T>>>;

namespace detail {
inline void write_npy(std::ofstream& f, const std::string& descr, const shape& s, const char* data, std::size_t bytes) {
  std::string dims = "(";
  for (std::size_t i = 0; i < s.size(); ++i) dims += std::to_string(s[i]) + (s.size() == 1 ? "," : i + 1 < s.size() ? ", " : "");
  dims += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + dims + ", }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  const auto len = static_cast<std::uint16_t>(h.size());
  f.write("\x93NUMPY\x01\x00", 8);
  const char l[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(l, 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(data, static_cast<std::streamsize>(bytes));
}
/// Reads one record's header: its descr and shape.
inline std::pair<std::string, shape> read_npy_header(std::ifstream& f, const std::string& path) {
  char magic[10];
  if (!f.read(magic, 10) || std::memcmp(magic, "\x93NUMPY", 6) != 0 || magic[6] != 1)
    fusegrad::detail::fail("nn::load", path, " is not a sequence of .npy records (format 1.0); expected a file written by nn::save");
  const std::size_t len = static_cast<unsigned char>(magic[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(magic[9])) << 8);
  std::string h(len, ' ');
  if (!f.read(h.data(), static_cast<std::streamsize>(len))) fusegrad::detail::fail("nn::load", path, ": truncated .npy header");
  auto field = [&](const std::string& key) {
    const auto at = h.find("'" + key + "': ");
    if (at == std::string::npos) fusegrad::detail::fail("nn::load", path, ": .npy header without '", key, "'");
    return at + key.size() + 4;
  };
  const auto d = field("descr");
  const std::string descr = h.substr(d + 1, h.find('\'', d + 1) - d - 1);
  if (h.compare(field("fortran_order"), 5, "False") != 0) fusegrad::detail::fail("nn::load", path, ": Fortran-ordered array; expected C order");
  const auto sh = field("shape");
  shape s;
  std::size_t i = sh + 1;
  while (i < h.size() && h[i] != ')') {
    if (h[i] >= '0' && h[i] <= '9') {
      index_t v = 0;
      while (h[i] >= '0' && h[i] <= '9') v = v * 10 + (h[i++] - '0');
      s.push_back(v);
    } else ++i;
  }
  return {descr, s};
}
template <Element T>
constexpr const char* descr_of() { return sizeof(T) == 4 ? "<f4" : "<f8"; }
}  // namespace detail

/// Writes `params` to `path` (see this header's comment).
template <Element T>
void save(const std::string& path, const named_tensors<T>& params) {
  if (params.empty()) fusegrad::detail::fail("nn::save", "no parameters to save; expected at least one");
  std::string names;
  for (const auto& [n, t] : params) {
    if (n.find('\n') != std::string::npos || n.empty())
      fusegrad::detail::fail("nn::save", "parameter name '", n, "'; expected a non-empty name without newlines");
    names += (names.empty() ? "" : "\n") + n;
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) fusegrad::detail::fail("nn::save", "cannot open ", path, " for writing");
  detail::write_npy(f, "|u1", {static_cast<index_t>(names.size())}, names.data(), names.size());
  for (const auto& [n, t] : params) {
    const std::vector<T> v = t.detach().to_vector();
    detail::write_npy(f, detail::descr_of<T>(), t.shape(), reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  if (!f) fusegrad::detail::fail("nn::save", "writing ", path, " failed");
}

/// Reads `path` into `params` (names, order, shapes and element type must match).
template <Element T>
void load(const std::string& path, const named_tensors<T>& params) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fusegrad::detail::fail("nn::load", "cannot open ", path);
  const auto [nd, ns] = detail::read_npy_header(f, path);
  if (nd != "|u1" || ns.size() != 1) fusegrad::detail::fail("nn::load", path, ": the first record is not the names (uint8 vector)");
  std::string names(static_cast<std::size_t>(ns[0]), '\0');
  f.read(names.data(), static_cast<std::streamsize>(names.size()));
  std::vector<std::string> got;
  for (std::size_t a = 0;;) {
    const auto b = names.find('\n', a);
    got.push_back(names.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  if (got.size() != params.size())
    fusegrad::detail::fail("nn::load", path, " holds ", got.size(), " parameters; expected ", params.size());
  no_grad ng;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto& [name, t] = params[k];
    if (got[k] != name) fusegrad::detail::fail("nn::load", path, ": parameter ", k, " is '", got[k], "'; expected '", name, "'");
    const auto [descr, s] = detail::read_npy_header(f, path);
    if (descr != detail::descr_of<T>())
      fusegrad::detail::fail("nn::load", path, ": '", name, "' has dtype ", descr, "; expected ", detail::descr_of<T>());
    if (s != t.shape())
      fusegrad::detail::fail("nn::load", path, ": '", name, "' has shape ", to_string(s), "; expected ", to_string(t.shape()));
    if (!t.is_contiguous()) fusegrad::detail::fail("nn::load", "'", name, "' is a non-contiguous view; expected a contiguous tensor");
    std::vector<T> v(static_cast<std::size_t>(t.numel()));
    if (!f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T))))
      fusegrad::detail::fail("nn::load", path, ": truncated data of '", name, "'");
    T* d = tensor<T>(t).data();
    std::copy(v.begin(), v.end(), d);
    t.impl()->store->bump_version();
  }
}

}  // namespace fusegrad::nn
