// Keeps the docs honest: every ```cpp block in docs/*.md, README.md and CONTRIBUTING.md must appear verbatim
// (line by line, ignoring common indentation) in one of examples/*.cpp, which are built and
// run as tests. Usage: docs_snippets <source dir>. Exits non-zero naming each stale block.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

static std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> r;
  for (std::string l; std::getline(in, l);) r.push_back(l);
  return r;
}

static std::string strip(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: docs_snippets <source dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  std::vector<std::vector<std::string>> examples;
  for (const auto& e : fs::directory_iterator(root / "examples"))
    if (e.path().extension() == ".cpp") {
      auto ls = lines_of(e.path());
      for (auto& l : ls) l = strip(l);
      examples.push_back(std::move(ls));
    }
  std::vector<fs::path> docs{root / "README.md", root / "CONTRIBUTING.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  int blocks = 0, stale = 0;
  for (const auto& doc : docs) {
    const auto ls = lines_of(doc);
    for (std::size_t i = 0; i < ls.size(); ++i) {
      if (strip(ls[i]) != "```cpp") continue;
      std::vector<std::string> block;
      std::size_t j = i + 1;
      for (; j < ls.size() && strip(ls[j]) != "```"; ++j)
        if (!strip(ls[j]).empty()) block.push_back(strip(ls[j]));
      ++blocks;
      bool found = block.empty();
      for (const auto& ex : examples) {
        std::vector<std::string> nonblank;
        for (const auto& l : ex)
          if (!l.empty()) nonblank.push_back(l);
        if (std::search(nonblank.begin(), nonblank.end(), block.begin(), block.end()) != nonblank.end()) {
          found = true;
          break;
        }
      }
      if (!found) {
        ++stale;
        std::cerr << doc.filename().string() << ":" << i + 1
                  << ": this cpp block is not in any examples/*.cpp (copy it from the example that runs it)\n";
      }
      i = j;
    }
  }
  std::cout << blocks << " doc snippets checked, " << stale << " not found in examples/\n";
  return stale == 0 ? 0 : 1;
}
