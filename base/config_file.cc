// See config_file.h.
#include "base/config_file.h"

#include <cerrno>
#include <cstdio>
#include <system_error>

#include "CLI/CLI.hpp"
#include "base/yaml_fields.h"

namespace cacheroute::base {

absl::Status ParseCommandLine(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return absl::NotFoundError(app.help());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadConfigFile(absl::string_view name, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return yaml::Invalid(name,
                         absl::StrCat("cannot open ", yaml::Quote(path), ": ",
                                      std::error_code(errno, std::generic_category()).message()));
  }
  std::string text;
  char buffer[1 << 14];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return yaml::Invalid(name,
                         absl::StrCat("cannot read ", yaml::Quote(path), ": ",
                                      std::error_code(error, std::generic_category()).message()));
  }
  return text;
}

}  // namespace cacheroute::base
