// The coverage-guided fuzz target of nn::load's reader (libFuzzer; docs/fuzzing.md, "The
// `.npy` reader's fuzz target"). Each input runs through the reader alone (every record to the
// end) and through the code nn::load runs on a file's bytes, into three fixed parameter lists
// (float and double; the seeds in corpus/ load into them). A fusegrad::error is the expected
// answer to a bad input; any other exception, a crash, a leak or a sanitizer report is a
// finding.
#include <fusegrad/eager/factories.hpp>
#include <fusegrad/nn/state_dict.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace {

namespace fg = fusegrad;

const std::string path = "fuzz.npy";

/// Every record's header and data, with nothing to compare them against.
void walk(std::span<const std::byte> bytes) {
  fg::nn::detail::npy_reader r(bytes, path);
  while (r.left() > 0) (void)r.data(r.header());
  r.expect_end();
}

template <class T>
void load(std::span<const std::byte> bytes, const fg::nn::named_tensors<T>& params) {
  try {
    fg::nn::detail::load_bytes<T>(bytes, path, params);
  } catch (const fg::error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fg::nn::named_tensors<float> wb = {{"w", fg::zeros<float>({2, 3})}, {"b", fg::zeros<float>({2})}};
  static const fg::nn::named_tensors<float> scalar_empty = {{"s", fg::zeros<float>({})}, {"e", fg::zeros<float>({0})}};
  static const fg::nn::named_tensors<double> weight_bias = {{"weight", fg::zeros<double>({3, 2})},
                                                            {"bias", fg::zeros<double>({3})}};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    walk(bytes);
  } catch (const fg::error&) {}
  load(bytes, wb);
  load(bytes, scalar_empty);
  load(bytes, weight_bias);
  return 0;
}
