// Replay driver for fuselage's fuzz targets when they are not linked with libFuzzer (the
// gcc build and the asan/ubsan test configs): runs LLVMFuzzerTestOneInput once per file
// named on the command line, descending into directories in sorted order. This is how the
// checked-in corpora and crash regressions run as ordinary tests.
//
// Exit status: 0 if at least one input ran and none failed a property (a failed property
// aborts); 1 if no input was found, so a mistyped corpus path cannot pass silently.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> CollectInputs(const std::vector<std::string>& roots) {
  std::vector<std::filesystem::path> inputs;
  for (const std::string& root : roots) {
    std::error_code error;
    if (std::filesystem::is_directory(root, error)) {
      std::vector<std::filesystem::path> found;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(
               root, std::filesystem::directory_options::follow_directory_symlink)) {
        if (std::filesystem::is_regular_file(entry.path(), error)) found.push_back(entry.path());
      }
      std::sort(found.begin(), found.end());
      inputs.insert(inputs.end(), found.begin(), found.end());
    } else if (std::filesystem::is_regular_file(root, error)) {
      inputs.emplace_back(root);
    } else {
      std::fprintf(stderr, "replay: '%s' is neither a file nor a directory\n", root.c_str());
    }
  }
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> roots;
  for (int i = 1; i < argc; ++i) {
    // libFuzzer-style flags (-runs=..., -max_len=...) are accepted and ignored, so the
    // same command line works with either driver.
    if (argv[i][0] != '-') roots.emplace_back(argv[i]);
  }
  const std::vector<std::filesystem::path> inputs = CollectInputs(roots);
  for (const std::filesystem::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    // A copy in its own allocation, so ASan sees reads past the end of the input.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::fprintf(stderr, "replay: %zu input(s) ran without a finding\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
