// Reading a program's configuration: the file named by a flag or a YAML key, the `--config` file
// parsed over defaults, and the command line parsed into a CLI11 app, all as absl::Status (no
// exception leaves these functions). cacheroute-planner and cacheroute-gateway load with them.
//
// Usage:
//   if (absl::Status s = base::ParseCommandLine(app, argc, argv); !s.ok()) return s;  // --help:
//   NotFound CACHEROUTE_ASSIGN_OR_RETURN(config, base::ParseConfigFile(path, config,
//   &ParseMyYaml)); CACHEROUTE_ASSIGN_OR_RETURN(std::string token,
//   base::ReadConfigFile("token_file", path));
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cacheroute::base {

// The whole of file `path`; InvalidArgument naming `name` (the key or flag that gave the path),
// the path and the system's reason when it cannot be opened or read.
absl::StatusOr<std::string> ReadConfigFile(absl::string_view name, const std::string& path);

// `parse(text, base)` of the file `path` given by --config, read with ReadConfigFile; a parse
// error is InvalidArgument prefixed with the path.
template <class Config, class Parse>
absl::StatusOr<Config> ParseConfigFile(const std::string& path, const Config& base, Parse parse) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, ReadConfigFile("--config", path));
  absl::StatusOr<Config> parsed = parse(text, base);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  return parsed;
}

// Parses the command line into `app`: --help is NotFound carrying the help text, a bad flag
// InvalidArgument with CLI11's message.
absl::Status ParseCommandLine(CLI::App& app, int argc, const char* const* argv);

}  // namespace cacheroute::base
