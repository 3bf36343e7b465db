// A uniquely named folder under the system temp directory, removed with its contents when the
// object dies. Meant for tests and tools that build throwaway files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <string_view>

namespace tediserve {

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "tedi") {
    std::random_device rd;
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    // pid + random suffix: parallel test processes must not share a folder.
    for (int attempt = 0; attempt < 100 && path_.empty(); ++attempt) {
      std::filesystem::path candidate =
          base / (std::string(prefix) + "_" + std::to_string(::getpid()) + "_" +
                  std::to_string(rd()));
      std::error_code ec;
      if (std::filesystem::create_directory(candidate, ec)) path_ = candidate;
    }
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty if the folder could not be created.
  const std::filesystem::path& path() const { return path_; }
  // path()/name as a string.
  std::string File(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tediserve
