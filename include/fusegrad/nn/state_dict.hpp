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
/// `load` treats the file as untrusted input (npy.hpp): it accepts records of format 1.0, 2.0
/// and 3.0 whose header dict parses by its grammar, checks every length against the bytes
/// left in the file before allocating or reading, checks the names, their order, each
/// record's dtype and shape against `params`, and that the file ends after the last record.
/// It validates the whole file before it copies into any tensor, so a failed load leaves
/// `params` as they were; it holds the file in memory once while it does. Every failure is a
/// `fusegrad::error` naming the path, what was found and what was expected.
///
/// `save` cannot lose data (atomic_file.hpp): it writes a temporary file beside `path`, checks
/// every write, flushes it to the disk and renames it over `path`. On failure it throws and
/// `path` holds its old content; a crash leaves either the old or the new file, complete (and
/// perhaps a stray temporary `.<name>.tmp.<pid>.<n>` in the same directory).
#include <bit>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/nn/atomic_file.hpp"
#include "fusegrad/nn/npy.hpp"
#include "fusegrad/nn/parameters.hpp"

namespace fusegrad::nn {

namespace detail {
// The records are little-endian; a big-endian host would need to swap bytes in save and load.
static_assert(std::endian::native == std::endian::little, "nn::save/nn::load copy '<f4'/'<f8' bytes as they are");

template <Element T>
constexpr const char* descr_of() {
  return sizeof(T) == 4 ? "<f4" : "<f8";
}

/// The names joined by '\n'; throws for a name that is empty or holds a newline.
template <Element T>
std::string joined_names(const named_tensors<T>& params) {
  if (params.empty()) fusegrad::detail::fail("nn::save", "no parameters to save; expected at least one");
  std::string names;
  for (const auto& [n, t] : params) {
    if (n.find('\n') != std::string::npos || n.empty())
      fusegrad::detail::fail("nn::save", "parameter name '", n, "'; expected a non-empty name without newlines");
    names += (names.empty() ? "" : "\n") + n;
  }
  return names;
}

/// Writes one record: its header, then `bytes` bytes of data.
inline void write_record(atomic_file& f, const char* descr, const shape& s, const void* data, std::size_t bytes) {
  const std::string h = npy_record_header(descr, s);
  f.write(h.data(), h.size());
  f.write(data, bytes);
}

/// Writes the record of one tensor (a strided view through a contiguous copy).
template <Element T>
void write_tensor(atomic_file& f, const tensor<T>& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  if (n == 0 || t.is_contiguous())
    return write_record(f, descr_of<T>(), t.shape(), n == 0 ? nullptr : t.data(), n * sizeof(T));
  const std::vector<T> v = t.to_vector();
  write_record(f, descr_of<T>(), t.shape(), v.data(), n * sizeof(T));
}

/// Every byte of the file at `path` (as many as are there: no length is trusted).
inline std::vector<std::byte> read_file(const std::string& path) {
#if FUSEGRAD_POSIX_FILES
  // A FIFO or a device (/dev/zero) would be read for ever: only regular files are state dicts.
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fusegrad::detail::fail("nn::load", path, " is not a regular file; expected a file written by nn::save");
#endif
  std::ifstream f(path, std::ios::binary);
  if (!f) fusegrad::detail::fail("nn::load", "cannot open ", path, "; expected a readable file written by nn::save");
  std::vector<std::byte> bytes;
  constexpr std::size_t chunk = std::size_t{1} << 20;
  while (f) {
    const std::size_t had = bytes.size();
    bytes.resize(had + chunk);
    f.read(reinterpret_cast<char*>(bytes.data() + had), static_cast<std::streamsize>(chunk));
    bytes.resize(had + static_cast<std::size_t>(f.gcount()));
  }
  if (f.bad())
    fusegrad::detail::fail("nn::load", "reading ", path, " failed; expected a readable file written by nn::save");
  return bytes;
}

/// The names record, split at '\n'.
inline std::vector<std::string> read_names(npy_reader& r, const std::string& path) {
  const npy_header h = r.header();
  if (h.descr != "|u1" || h.dims.size() != 1)
    fusegrad::detail::fail("nn::load", path, ": the first record has dtype ", h.descr, " and shape ", to_string(h.dims),
                           "; expected the names (a uint8 vector, dtype |u1)");
  const auto bytes = r.data(h);
  const std::string_view names(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::string> got;
  for (std::size_t a = 0;;) {
    const auto b = names.find('\n', a);
    got.emplace_back(names.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) return got;
    a = b + 1;
  }
}

/// The data of the record for `name`, checked against the tensor it is loaded into.
template <Element T>
std::span<const std::byte> tensor_record(npy_reader& r, const std::string& path, const std::string& name,
                                         const tensor<T>& t) {
  const npy_header h = r.header();
  if (h.descr != descr_of<T>())
    fusegrad::detail::fail("nn::load", path, ": '", name, "' has dtype ", h.descr, "; expected ", descr_of<T>());
  if (h.dims != t.shape())
    fusegrad::detail::fail("nn::load", path, ": '", name, "' has shape ", to_string(h.dims), "; expected ",
                           to_string(t.shape()));
  if (!t.is_contiguous())
    fusegrad::detail::fail("nn::load", "'", name, "' is a non-contiguous view; expected a contiguous tensor");
  return r.data(h);
}

/// `nn::load` of the bytes of a file (`path` names it in errors): the whole input is checked
/// before any tensor is written.
template <Element T>
void load_bytes(std::span<const std::byte> bytes, const std::string& path, const named_tensors<T>& params) {
  npy_reader r(bytes, path);
  const std::vector<std::string> got = read_names(r, path);
  if (got.size() != params.size())
    fusegrad::detail::fail("nn::load", path, " holds ", got.size(), " parameters; expected ", params.size());
  for (std::size_t k = 0; k < params.size(); ++k)
    if (got[k] != params[k].first)
      fusegrad::detail::fail("nn::load", path, ": parameter ", k, " is '", got[k], "'; expected '", params[k].first,
                             "'");
  std::vector<std::span<const std::byte>> data;
  for (const auto& [name, t] : params) data.push_back(tensor_record(r, path, name, t));
  r.expect_end();
  no_grad ng;
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (data[k].empty()) continue;
    std::memcpy(params[k].second.data(), data[k].data(), data[k].size());
    params[k].second.impl()->store->bump_version();
  }
}
}  // namespace detail

/// Writes `params` to `path`, replacing it only once every byte is on the disk (see this
/// header's comment).
template <Element T>
void save(const std::string& path, const named_tensors<T>& params) {
  const std::string names = detail::joined_names(params);
  detail::atomic_file f(path);
  detail::write_record(f, "|u1", {static_cast<index_t>(names.size())}, names.data(), names.size());
  for (const auto& p : params) detail::write_tensor(f, p.second);
  f.commit();
}

/// Reads `path` into `params` (names, order, shapes and element type must match).
template <Element T>
void load(const std::string& path, const named_tensors<T>& params) {
  const std::vector<std::byte> bytes = detail::read_file(path);
  detail::load_bytes<T>(bytes, path, params);
}

}  // namespace fusegrad::nn
