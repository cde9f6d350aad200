// A fresh directory under $TMPDIR (or /tmp), removed with its contents at destruction.
#pragma once

#include <filesystem>
#include <string_view>

namespace tether::test {

class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes (replacing) `name` inside the directory; returns its full path.
  std::filesystem::path write_file(std::string_view name, std::string_view text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace tether::test
