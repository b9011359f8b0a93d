#pragma once
/// \file fusegrad/nn/npy.hpp
/// NumPy's `.npy` records as bytes, for `nn::save` and `nn::load` (state_dict.hpp): the
/// header `nn::save` writes, and a reader that treats its input as hostile.
///
/// A record is the magic `\x93NUMPY`, a version (1.0: a 2-byte header length; 2.0 and 3.0,
/// which NumPy writes for large headers: a 4-byte one), the header -- a Python literal dict
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` padded with spaces and a
/// newline -- and the data. The reader parses the dict by its grammar (quoted keys and
/// strings, `True`/`False`, a tuple of non-negative integers, whitespace, trailing commas);
/// an unknown, duplicate or missing key, a Fortran-ordered array, a dtype the loader does not
/// know, a dimension that overflows `int64`, and a size larger than the bytes left in the
/// input are each a `fusegrad::error` naming what was found and what was expected, raised
/// before anything is allocated for the record.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/shape.hpp"

namespace fusegrad::nn::detail {

/// One record's header: its dtype (`descr`) and its shape, in C order.
struct npy_header {
  std::string descr;
  shape dims;
};

/// The bytes of one element of the dtypes the loader knows (`|u1`: the names record), or 0.
inline std::size_t npy_itemsize(std::string_view descr) {
  return descr == "|u1" ? 1 : descr == "<f4" ? 4 : descr == "<f8" ? 8 : 0;
}

/// The bytes of a format-1.0 record's magic, version, header length and header, padded so
/// that the data starts at a multiple of 64 bytes (as NumPy writes it).
inline std::string npy_record_header(std::string_view descr, const shape& s) {
  std::string dims = "(";
  for (std::size_t i = 0; i < s.size(); ++i)
    dims += std::to_string(s[i]) + (s.size() == 1 ? "," : i + 1 < s.size() ? ", " : "");
  dims += ")";
  std::string h = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + dims + ", }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  const auto len = static_cast<std::uint16_t>(h.size());
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(len & 0xff) + static_cast<char>(len >> 8) + h;
}

/// A recursive-descent parser of a header dict (the text between the header length and the
/// data). Every error names the byte offset in the header, what it found and what it expected.
class npy_dict_parser {
 public:
  npy_dict_parser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  /// The dict's descr and shape; throws unless it is exactly one well-formed dict of the three
  /// keys, in C order, of a dtype the loader knows.
  npy_header parse() {
    npy_header h;
    bool seen[3] = {false, false, false};
    bool fortran = false;
    skip_ws();
    expect('{', "'{' (a .npy header is a Python dict)");
    for (skip_ws(); !eat('}');) {
      entry(h, seen, fortran);
      skip_ws();
      if (eat(',')) {
        skip_ws();
        continue;
      }
      expect('}', "',' or '}' after a value");
      break;
    }
    skip_ws();
    if (at_ != text_.size()) bad("after the dict", "only spaces and a newline");
    static constexpr const char* keys[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; ++k)
      if (!seen[k])
        fusegrad::detail::fail("nn::load", path_, ": .npy header without '", keys[k],
                               "'; expected the keys 'descr', 'fortran_order' and 'shape'");
    if (fortran)
      fusegrad::detail::fail("nn::load", path_, ": .npy header has 'fortran_order': True; expected C order (False)");
    if (npy_itemsize(h.descr) == 0)
      fusegrad::detail::fail("nn::load", path_, ": .npy header has dtype '", h.descr,
                             "'; expected '<f4', '<f8' or '|u1'");
    return h;
  }

 private:
  /// Most dimensions a shape may have (NumPy 2's limit).
  static constexpr std::size_t max_dims = 64;

  /// One `key: value` pair.
  void entry(npy_header& h, bool (&seen)[3], bool& fortran) {
    const std::size_t key_at = at_;
    const std::string key(quoted("a quoted key"));
    const int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
    if (k < 0)
      fusegrad::detail::fail("nn::load", path_, ": .npy header has the key '", key, "' at byte ", key_at,
                             "; expected only 'descr', 'fortran_order' and 'shape'");
    if (seen[k])
      fusegrad::detail::fail("nn::load", path_, ": .npy header has the key '", key, "' twice; expected each key once");
    seen[k] = true;
    skip_ws();
    expect(':', "':' after a key");
    skip_ws();
    if (k == 0) h.descr = quoted("a quoted dtype");
    if (k == 1) fortran = boolean();
    if (k == 2) h.dims = tuple();
  }

  /// A string in single or double quotes, without escapes (no key or dtype needs one).
  std::string_view quoted(const char* what) {
    const char q = at_ < text_.size() ? text_[at_] : '\0';
    if (q != '\'' && q != '"') bad("", what);
    const std::size_t begin = ++at_;
    while (at_ < text_.size() && text_[at_] != q) {
      const char c = text_[at_];
      if (c == '\\' || c == '\n' || static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        bad("inside a string", "printable ASCII without escapes");
      ++at_;
    }
    if (at_ == text_.size()) bad("inside a string", "its closing quote");
    return text_.substr(begin, at_++ - begin);
  }

  /// `True` or `False`.
  bool boolean() {
    const std::size_t begin = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) || text_[at_] == '_')) ++at_;
    const std::string_view word = text_.substr(begin, at_ - begin);
    if (word == "True" || word == "False") return word == "True";
    at_ = begin;
    bad("", "True or False");
  }

  /// A Python tuple of dimensions: `()`, `(3,)`, `(2, 3)`, `(2, 3,)`; `(3)` is an integer.
  shape tuple() {
    expect('(', "'(' (the shape is a tuple)");
    shape s;
    bool comma = false;
    for (skip_ws(); !eat(')'); skip_ws()) {
      if (s.size() == max_dims) bad("in the shape", "at most 64 dimensions");
      s.push_back(dimension());
      skip_ws();
      comma = eat(',');
      if (!comma) {
        expect(')', "',' or ')' after a dimension");
        break;
      }
    }
    if (s.size() == 1 && !comma)
      fusegrad::detail::fail("nn::load", path_, ": .npy header has the shape (", s[0],
                             "), an integer in Python; expected a tuple (", s[0], ",)");
    return s;
  }

  /// A non-negative decimal integer that fits `index_t`.
  index_t dimension() {
    if (at_ == text_.size() || text_[at_] < '0' || text_[at_] > '9') bad("", "a dimension (a non-negative integer)");
    if (text_[at_] == '0' && at_ + 1 < text_.size() && text_[at_ + 1] >= '0' && text_[at_ + 1] <= '9')
      bad("after a 0", "a dimension without leading zeros");
    index_t v = 0;
    for (; at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; ++at_) {
      const int d = text_[at_] - '0';
      if (v > (std::numeric_limits<index_t>::max() - d) / 10)
        fusegrad::detail::fail("nn::load", path_, ": .npy header has a dimension above ",
                               std::numeric_limits<index_t>::max(), " at byte ", at_,
                               "; expected a size that fits int64");
      v = v * 10 + d;
    }
    return v;
  }

  void skip_ws() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  bool eat(char c) {
    if (at_ == text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) bad("", what);
  }

  /// Throws: found <the byte at the cursor> (<where>) at byte <n>; expected <what>.
  [[noreturn]] void bad(std::string_view where, std::string_view what) const {
    std::string found = "the end of the header";
    if (at_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[at_]);
      static constexpr char hex[] = "0123456789abcdef";
      found = c >= 0x20 && c < 0x7f ? std::string{'\'', static_cast<char>(c), '\''}
                                    : std::string{'\'', '\\', 'x', hex[c >> 4], hex[c & 15], '\''};
    }
    fusegrad::detail::fail("nn::load", path_, ": .npy header: found ", found, where.empty() ? "" : " ", where,
                           " at byte ", at_, "; expected ", what);
  }

  std::string_view text_;
  const std::string& path_;
  std::size_t at_ = 0;
};

/// Reads `.npy` records from bytes in memory, checking every length against what is left
/// before it is used.
class npy_reader {
 public:
  npy_reader(std::span<const std::byte> bytes, std::string path) : bytes_(bytes), path_(std::move(path)) {}

  /// The next record's header (magic, version, header length, dict).
  npy_header header() {
    const std::size_t start = at_;
    const auto magic = take(8, "a record's magic and version");
    if (std::memcmp(magic.data(), "\x93NUMPY", 6) != 0)
      fusegrad::detail::fail("nn::load", path_, ": no .npy magic at byte ", start,
                             "; expected a sequence of .npy records (a file written by nn::save)");
    const auto major = static_cast<unsigned>(magic[6]), minor = static_cast<unsigned>(magic[7]);
    if (major < 1 || major > 3 || minor != 0)
      fusegrad::detail::fail("nn::load", path_, ": .npy format version ", major, ".", minor, " at byte ", start,
                             "; expected 1.0, 2.0 or 3.0");
    const auto len_bytes = take(major == 1 ? 2 : 4, "a record's header length");
    std::size_t len = 0;
    for (std::size_t i = len_bytes.size(); i-- > 0;) len = len << 8 | static_cast<std::size_t>(len_bytes[i]);
    const auto text = take(len, "a record's header");
    return npy_dict_parser(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), path_).parse();
  }

  /// The data of a record with header `h`: numel * itemsize bytes, counted without overflow.
  std::span<const std::byte> data(const npy_header& h) {
    std::size_t bytes = npy_itemsize(h.descr);
    for (const index_t d : h.dims) {
      const auto n = static_cast<std::size_t>(d);
      if (n != 0 && bytes > std::numeric_limits<std::size_t>::max() / n)
        fusegrad::detail::fail("nn::load", path_, ": .npy record of shape ", to_string(h.dims), " and dtype ", h.descr,
                               " has more bytes than fit in 64 bits; expected at most the ", left(),
                               " bytes left in the file");
      bytes *= n;
    }
    return take(bytes, "a record's data");
  }

  /// Throws unless every byte has been read.
  void expect_end() const {
    if (left() != 0)
      fusegrad::detail::fail("nn::load", path_, ": ", left(), " bytes after the last record (at byte ", at_,
                             "); expected the file to end there");
  }

  [[nodiscard]] std::size_t left() const { return bytes_.size() - at_; }

 private:
  std::span<const std::byte> take(std::size_t n, const char* what) {
    if (n > left())
      fusegrad::detail::fail("nn::load", path_, ": truncated: ", what, " at byte ", at_, " needs ", n, " bytes, and ",
                             left(), " are left in the file; expected a complete record");
    const auto r = bytes_.subspan(at_, n);
    at_ += n;
    return r;
  }

  std::span<const std::byte> bytes_;
  std::string path_;
  std::size_t at_ = 0;
};

}  // namespace fusegrad::nn::detail
