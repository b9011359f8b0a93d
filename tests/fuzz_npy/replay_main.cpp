// Runs npy_fuzz's LLVMFuzzerTestOneInput on files, without libFuzzer: every file named on the
// command line, and every file in a folder named there (the seed corpus in CTest's
// `npy_fuzz_replay`, a crash's reproducer by hand). Any compiler builds it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
void run(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}
}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::filesystem::is_directory(argv[i])) {
      run(argv[i]), ++files;
      continue;
    }
    for (const auto& e : std::filesystem::directory_iterator(argv[i]))
      if (e.is_regular_file()) run(e.path()), ++files;
  }
  std::printf("npy_fuzz_replay: %d inputs run\n", files);
  return files > 0 ? 0 : 1;
}
