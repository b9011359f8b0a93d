// nn::save / nn::load (state_dict.hpp): the .npy layout byte by byte; hostile files, each a
// fusegrad::error naming what was wrong; files written by hand as NumPy writes them; bit-exact
// round trips; saves that fail (a device, /proc, a parent that is a file, a file-size limit)
// leaving the old file as it was; and a saving process killed mid-write, after which the file
// at the path is always a complete old or new one.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace fg = fusegrad;
namespace fs = std::filesystem;
using tf = fg::tensor<float>;

namespace {

/// A fresh directory, removed with everything in it at the end of the test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string t = (fs::temp_directory_path() / "fusegrad_state_dict_XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path / name).string(); }
  /// The names in the directory, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A record with the header dict `dict` as written (padded as NumPy pads it), then `data`.
/// `version` 1 has a 2-byte header length, 2 and 3 a 4-byte one.
std::string record(std::string dict, const std::string& data, int version = 1) {
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string r = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) r += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return r + dict + data;
}
std::string names_record(const std::string& names) {
  return record("{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(names.size()) + ",), }", names);
}
/// The bytes of `n` floats 0, 1, 2, ...
std::string floats(std::size_t n) {
  std::string r(n * 4, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<float>(i);
    std::memcpy(r.data() + 4 * i, &v, 4);
  }
  return r;
}
/// A file of one float parameter 'w' with the header dict `dict` and `data`.
std::string file_w(const std::string& dict, const std::string& data) { return names_record("w") + record(dict, data); }
const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

/// Loads `bytes` (written to a file) into one float [2, 3] parameter 'w': "" when it loads,
/// else the fusegrad::error's message (any other exception fails the test).
std::string load_message(const std::string& bytes) {
  temp_dir d;
  write_bytes(d / "f.npy", bytes);
  try {
    fg::nn::load<float>(d / "f.npy", {{"w", fg::zeros<float>({2, 3})}});
  } catch (const fg::error& e) {
    CHECK(e.op() == "nn::load");
    return e.what();
  }
  return "";
}

/// Checks that `bytes` fails to load with a message holding every one of `words`.
void check_rejected(const std::string& bytes, std::initializer_list<const char*> words) {
  const std::string m = load_message(bytes);
  INFO("message: ", m);
  CHECK(!m.empty());
  for (const char* w : words) CHECK(m.find(w) != std::string::npos);
}

bool same_bits(const tf& a, const tf& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("state dict: the .npy records, a round trip and the errors") {
  temp_dir dir;
  const std::string path = dir / "state.npy";
  fg::nn::linear<float> a(3, 2, true, 1), b(3, 2, true, 2);
  fg::nn::save<float>(path, {{"weight", a.weight}, {"bias", a.bias}});
  {  // The layout, by the .npy format 1.0 specification.
    const std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() > 10);
    CHECK(bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
    const std::size_t len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    CHECK((10 + len) % 64 == 0);
    const std::string h = bytes.substr(10, len);
    CHECK(h.find("{'descr': '|u1', 'fortran_order': False, 'shape': (11,), }") == 0);
    CHECK(h.back() == '\n');
    CHECK(bytes.substr(10 + len, 11) == "weight\nbias");
    const std::size_t second = 10 + len + 11;
    CHECK(bytes.compare(second, 6, "\x93NUMPY") == 0);
    const std::size_t len2 = static_cast<unsigned char>(bytes[second + 8]) |
                             (static_cast<std::size_t>(static_cast<unsigned char>(bytes[second + 9])) << 8);
    CHECK(bytes.substr(second + 10, len2).find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 0);
    float w0;
    std::memcpy(&w0, bytes.data() + second + 10 + len2, 4);
    CHECK(w0 == a.weight.to_vector()[0]);
  }
  fg::nn::load<float>(path, {{"weight", b.weight}, {"bias", b.bias}});
  CHECK(b.weight.to_vector() == a.weight.to_vector());
  CHECK(b.bias.to_vector() == a.bias.to_vector());
  CHECK(b.weight.requires_grad());
  fg::nn::linear<float> wrong(4, 2);
  CHECK_THROWS_WITH_AS(fg::nn::load<float>(path, {{"weight", wrong.weight}, {"bias", wrong.bias}}),
                       doctest::Contains("'weight' has shape [2, 3]; expected [2, 4]"), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::load<float>(path, {{"w", b.weight}, {"bias", b.bias}}),
                       doctest::Contains("parameter 0 is 'weight'; expected 'w'"), fg::error);
  fg::tensor<double> d = fg::zeros<double>({2, 3});
  CHECK_THROWS_WITH_AS(fg::nn::load<double>(path, {{"weight", d}, {"bias", fg::zeros<double>({2})}}),
                       doctest::Contains("has dtype <f4; expected <f8"), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::load<float>(path, {{"weight", b.weight}}),
                       doctest::Contains("holds 2 parameters; expected 1"), fg::error);
  CHECK_THROWS_AS(fg::nn::load<float>(dir / "no_such_file.npy", {{"weight", b.weight}}), fg::error);
}

TEST_CASE("state dict: files written by hand as NumPy writes them load") {
  const auto loads = [](const std::string& bytes) {
    temp_dir d;
    write_bytes(d / "f.npy", bytes);
    const tf w = fg::zeros<float>({2, 3});
    fg::nn::load<float>(d / "f.npy", {{"w", w}});
    CHECK(w.to_vector() == std::vector<float>{0, 1, 2, 3, 4, 5});
  };
  loads(file_w(good_dict, floats(6)));
  // Double quotes, no trailing comma, other whitespace, keys in another order.
  loads(file_w("{\"shape\":(2,3),\"descr\":\"<f4\",\t\"fortran_order\" : False}", floats(6)));
  loads(file_w("  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }  ", floats(6)));
  // Format 2.0 and 3.0 (a 4-byte header length), which NumPy writes for large headers.
  loads(names_record("w") + record(good_dict, floats(6), 2));
  loads(names_record("w") + record(good_dict, floats(6), 3));
  // A scalar (shape ()) and an empty array.
  temp_dir d;
  write_bytes(d / "s.npy", names_record("s\ne") +
                               record("{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                                      std::string("\0\0\0\0\0\0\xf0\x3f", 8)) +
                               record("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }", ""));
  const fg::tensor<double> s = fg::zeros<double>({}), e = fg::zeros<double>({0, 4});
  fg::nn::load<double>(d / "s.npy", {{"s", s}, {"e", e}});
  CHECK(s.item() == 1.0);
}

TEST_CASE("state dict: hostile headers are errors that name what was wrong") {
  const auto dict = [](const std::string& shape) {
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  check_rejected(file_w(dict("(99999999999999999999, 3)"), floats(6)),
                 {"dimension above 9223372036854775807", "fits int64"});
  check_rejected(file_w(dict("(9223372036854775808,)"), floats(6)), {"dimension above 9223372036854775807"});
  check_rejected(file_w(dict("(-2, -3)"), floats(6)), {"found '-'", "expected a dimension (a non-negative integer)"});
  check_rejected(file_w(dict("(2.3,)"), floats(6)), {"found '.'", "expected ',' or ')' after a dimension"});
  check_rejected(file_w(dict("(2, 3e0)"), floats(6)), {"found 'e'"});
  check_rejected(file_w(dict("(6)"), floats(6)), {"the shape (6), an integer in Python; expected a tuple (6,)"});
  check_rejected(file_w(dict("(02, 3)"), floats(6)), {"without leading zeros"});
  check_rejected(file_w(dict("[2, 3]"), floats(6)), {"found '['", "the shape is a tuple"});
  std::string many = "(";
  for (int i = 0; i < 65; ++i) many += "1,";
  check_rejected(file_w(dict(many + ")"), floats(1)), {"at most 64 dimensions"});
  check_rejected(file_w("{'descr': ", ""), {"found the end of the header", "expected a quoted dtype"});
  check_rejected(file_w("{'descr': '<f4", ""), {"found '\\x0a' inside a string", "printable ASCII without escapes"});
  check_rejected(file_w("{'descr': '<f4', 'shape': (2, 3), }", floats(6)), {"without 'fortran_order'"});
  check_rejected(file_w("{'descr': '<f4', 'fortran_order': False}", floats(6)), {"without 'shape'"});
  check_rejected(file_w("{}", floats(6)), {"without 'descr'"});
  check_rejected(file_w("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", floats(6)),
                 {"'fortran_order': True; expected C order"});
  check_rejected(file_w("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", floats(6)),
                 {"found '0'", "expected True or False"});
  check_rejected(file_w("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", floats(6)),
                 {"dtype '>f4'; expected '<f4', '<f8' or '|u1'"});
  check_rejected(file_w("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", floats(6)),
                 {"the key 'descr' twice"});
  check_rejected(file_w("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", floats(6)),
                 {"the key 'x'", "expected only"});
  check_rejected(file_w(good_dict + "}", floats(6)), {"found '}' after the dict", "only spaces and a newline"});
  check_rejected(file_w("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", floats(6)),
                 {"expected ',' or '}' after a value"});
  check_rejected(file_w("{'descr': '<\\x66', 'fortran_order': False, 'shape': (2, 3)}", floats(6)),
                 {"without escapes"});
  check_rejected(file_w(good_dict + std::string(1, '\0'), floats(6)), {"found '\\x00' after the dict"});
}

TEST_CASE("state dict: hostile record framing is an error checked before allocating") {
  // A names record that claims 10^15 bytes: refused against the file's size, nothing allocated.
  check_rejected(record("{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000000,), }", "w"),
                 {"truncated", "needs 1000000000000000 bytes, and 1 are left"});
  {  // numel * itemsize past 64 bits (nn::load compares the shape first: the reader itself).
    const std::string bytes =
        record("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "");
    const std::string path = "mem.npy";
    fg::nn::detail::npy_reader r(std::as_bytes(std::span(bytes)), path);
    const auto h = r.header();
    CHECK_THROWS_WITH_AS(
        (void)r.data(h),
        doctest::Contains("of shape [4294967296, 4294967296] and dtype <f4 has more bytes than fit in 64 bits"),
        fg::error);
  }
  check_rejected(file_w(good_dict, floats(6).substr(0, 10)),
                 {"truncated: a record's data", "needs 24 bytes, and 10 are left"});
  check_rejected(file_w(good_dict, floats(6)) + "xyz",
                 {"3 bytes after the last record", "expected the file to end there"});
  check_rejected(file_w(good_dict, floats(6)) + std::string("\x93NUMPY\x01\x00", 8), {"8 bytes after the last record"});
  check_rejected("", {"truncated: a record's magic and version at byte 0 needs 8 bytes, and 0 are left"});
  check_rejected(std::string("\x93NUMPZ\x01\x00", 8) + file_w(good_dict, floats(6)).substr(8),
                 {"no .npy magic at byte 0"});
  check_rejected("PK\x03\x04 a zip file, not npy", {"no .npy magic at byte 0"});
  std::string v = file_w(good_dict, floats(6));
  v[6] = 4;
  check_rejected(v, {"format version 4.0 at byte 0; expected 1.0, 2.0 or 3.0"});
  v[6] = 1, v[7] = 1;
  check_rejected(v, {"format version 1.1"});
  std::string big = names_record("w");
  big += std::string("\x93NUMPY\x01\x00\x88\x13", 10) + "{'descr': '<f4'}";  // claims 5000 bytes
  check_rejected(big, {"truncated: a record's header", "needs 5000 bytes"});
  check_rejected(std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12),
                 {"a record's header at byte 12 needs 4294967295 bytes"});
  check_rejected(std::string("\x93NUMPY\x01\x00\x05", 9), {"a record's header length at byte 8 needs 2 bytes"});
  // The names record must come first, and be a uint8 vector.
  check_rejected(record(good_dict, floats(6)), {"the first record has dtype <f4 and shape [2, 3]"});
}

TEST_CASE("state dict: a failed load leaves every parameter as it was") {
  temp_dir d;
  const tf a = fg::full<float>({2}, 7.0f), b = fg::full<float>({3}, 7.0f);
  write_bytes(d / "f.npy", names_record("a\nb") +
                               record("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", floats(2)) +
                               record("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", floats(2)));
  CHECK_THROWS_WITH_AS(fg::nn::load<float>(d / "f.npy", {{"a", a}, {"b", b}}), doctest::Contains("truncated"),
                       fg::error);
  CHECK(a.to_vector() == std::vector<float>{7, 7});
  CHECK(b.to_vector() == std::vector<float>{7, 7, 7});
}

TEST_CASE("state dict: save and load round-trip bit-exactly, views included") {
  temp_dir d;
  std::vector<float> special = {0.0f,
                                -0.0f,
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::max(),
                                1.0f / 3.0f};
  std::uint32_t nan_bits = 0x7fc12345u;
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  special.push_back(nan);
  const tf s = fg::from_vector<float>(special);
  const tf m = fg::randn<float>({3, 4}, 5);
  const tf view = m.transpose(0, 1);  // non-contiguous: saved in its logical order
  fg::nn::save<float>(d / "f.npy", {{"special", s}, {"view", view}, {"empty", fg::zeros<float>({0})}});
  const tf s2 = fg::zeros<float>({8}), v2 = fg::zeros<float>({4, 3}), e2 = fg::zeros<float>({0});
  fg::nn::load<float>(d / "f.npy", {{"special", s2}, {"view", v2}, {"empty", e2}});
  CHECK(same_bits(s, s2));
  CHECK(same_bits(view, v2));
  const fg::tensor<double> x = fg::randn<double>({5, 2}, 9), y = fg::zeros<double>({5, 2});
  fg::nn::save<double>(d / "g.npy", {{"x", x}});
  fg::nn::load<double>(d / "g.npy", {{"x", y}});
  CHECK(x.to_vector() == y.to_vector());
  CHECK(d.names() == std::vector<std::string>{"f.npy", "g.npy"});  // no temporaries left
}

TEST_CASE("state dict: a save that cannot write throws and touches nothing") {
  const tf w = fg::ones<float>({2, 3});
  CHECK_THROWS_WITH_AS(fg::nn::save<float>("/dev/full", {{"w", w}}),
                       doctest::Contains("/dev/full is a character device"), fg::error);
  struct stat st {};
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  // Loading from a device would read for ever (/dev/zero): only regular files are read.
  CHECK_THROWS_WITH_AS(fg::nn::load<float>("/dev/zero", {{"w", w}}),
                       doctest::Contains("/dev/zero is not a regular file"), fg::error);
  const std::string version = read_bytes("/proc/version");
  CHECK_THROWS_WITH_AS(fg::nn::save<float>("/proc/version", {{"w", w}}), doctest::Contains("/proc/version"), fg::error);
  CHECK(read_bytes("/proc/version") == version);
  temp_dir d;
  write_bytes(d / "file", "not a directory");
  CHECK_THROWS_WITH_AS(fg::nn::save<float>(d / "file/state.npy", {{"w", w}}), doctest::Contains("Not a directory"),
                       fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::save<float>(d.path.string(), {{"w", w}}), doctest::Contains("is a directory"),
                       fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::save<float>(d / "", {{"w", w}}), doctest::Contains("names a directory"), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::save<float>(d / "no_dir/state.npy", {{"w", w}}),
                       doctest::Contains("No such file or directory"), fg::error);
  CHECK(d.names() == std::vector<std::string>{"file"});
  if (::geteuid() != 0) {  // root writes into a read-only directory anyway
    fg::nn::save<float>(d / "state.npy", {{"w", w}});
    fs::permissions(d.path, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    CHECK_THROWS_WITH_AS(fg::nn::save<float>(d / "state.npy", {{"w", fg::zeros<float>({2, 3})}}),
                         doctest::Contains("Permission denied"), fg::error);
    const tf r = fg::zeros<float>({2, 3});
    fg::nn::load<float>(d / "state.npy", {{"w", r}});
    CHECK(r.to_vector() == w.to_vector());
  }
}

TEST_CASE("state dict: a save that fails mid-write leaves the old file loadable") {
  temp_dir d;
  const std::string path = d / "state.npy";
  const tf old = fg::full<float>({1000}, 1.0f), big = fg::full<float>({100000}, 2.0f);
  fg::nn::save<float>(path, {{"w", old}});
  const std::string before = read_bytes(path);
  // A child whose file-size limit is 64 KiB: its write fails with EFBIG part way (as a full
  // disk would), as root too.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{65536, 65536};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      fg::nn::save<float>(path, {{"w", big}});
    } catch (const fg::error& e) {
      ::_exit(std::string(e.what()).find("File too large; the file at that path is unchanged") != std::string::npos
                  ? 0
                  : 3);
    }
    ::_exit(2);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_bytes(path) == before);
  CHECK(d.names() == std::vector<std::string>{"state.npy"});
  const tf r = fg::zeros<float>({1000});
  fg::nn::load<float>(path, {{"w", r}});
  CHECK(r.to_vector() == old.to_vector());
  // A save refused before it starts (a bad name) leaves it too.
  CHECK_THROWS_AS(fg::nn::save<float>(path, {{"a\nb", big}}), fg::error);
  CHECK(read_bytes(path) == before);
}

TEST_CASE("state dict: save keeps the file's permissions and writes through a symbolic link") {
  temp_dir d;
  const tf w = fg::ones<float>({3});
  fg::nn::save<float>(d / "state.npy", {{"w", w}});
  fs::permissions(d / "state.npy", fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink(d / "state.npy", d / "link.npy");
  fg::nn::save<float>(d / "link.npy", {{"w", fg::full<float>({3}, 4.0f)}});
  CHECK(fs::is_symlink(d / "link.npy"));
  CHECK(fs::status(d / "state.npy").permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  const tf r = fg::zeros<float>({3});
  fg::nn::load<float>(d / "state.npy", {{"w", r}});
  CHECK(r.to_vector() == std::vector<float>{4, 4, 4});
  CHECK(d.names() == std::vector<std::string>{"link.npy", "state.npy"});
  fs::create_symlink(d / "nothing.npy", d / "dangling.npy");
  CHECK_THROWS_WITH_AS(fg::nn::save<float>(d / "dangling.npy", {{"w", w}}),
                       doctest::Contains("a dangling link is not followed"), fg::error);
  CHECK(fs::is_symlink(d / "dangling.npy"));
}

namespace {
/// The value every element of every parameter holds in the file at `path` (which must load).
float uniform_value(const std::string& path, const fg::nn::named_tensors<float>& params) {
  for (const auto& p : params) std::fill_n(p.second.data(), p.second.numel(), -1.0f);
  fg::nn::load<float>(path, params);
  const float v = params[0].second.data()[0];
  for (const auto& p : params) {
    const auto x = p.second.to_vector();
    CHECK(std::all_of(x.begin(), x.end(), [&](float e) { return e == v; }));
  }
  return v;
}
}  // namespace

TEST_CASE("state dict: a saving process killed mid-write leaves the old or the new file, complete") {
  temp_dir d;
  const std::string path = d / "state.npy";
  // 24 MB in three parameters: a save takes long enough to be killed inside it.
  fg::nn::named_tensors<float> params = {
      {"a", fg::zeros<float>({2'000'000})}, {"b", fg::zeros<float>({3'000'000})}, {"c", fg::zeros<float>({1'000'000})}};
  fg::nn::save<float>(path, params);
  int changed = 0, temporaries = 0;
  float last = 0;
  for (const int delay_ms : {0, 3, 10, 30, 100, 250, 500}) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // saves 1, 2, 3, ... over the same path until killed
      ::alarm(30);   // never outlives a parent that died
      ::close(ready[0]);
      for (float k = last + 1;; ++k) {
        for (const auto& p : params) std::fill_n(p.second.data(), p.second.numel(), k);
        if (k == last + 1 && ::write(ready[1], "x", 1) != 1) ::_exit(2);
        try {
          fg::nn::save<float>(path, params);
        } catch (...) { ::_exit(1); }
      }
    }
    ::close(ready[1]);
    char c;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    const float v = uniform_value(path, params);
    CHECK(v >= last);
    changed += v != last;
    last = v;
    for (const std::string& name : d.names()) {  // what the killed process left: its temporary
      if (name == "state.npy") continue;
      CHECK(name.rfind(".state.npy.tmp." + std::to_string(pid) + ".", 0) == 0);
      fs::remove(d / name);
      ++temporaries;
    }
  }
  MESSAGE("the file changed after ", changed, " of 7 kills; ", temporaries, " temporaries were left by killed saves");
  fg::nn::save<float>(path, params);
  CHECK(d.names() == std::vector<std::string>{"state.npy"});
}
