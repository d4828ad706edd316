// What the command-line programs of tools/eval share in main(): the exit codes of parsing their
// arguments, and writing an output file whole. Header-only: each program links CLI11 already.
//
//   if (std::optional<int> code = ParseCommandLine(app, argc, argv)) return *code;
#pragma once

#include <fstream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace cacheroute::eval {

// Parses the arguments into `app`. Returns what main returns at once: 0 after --help (printed),
// 2 for a bad argument (its message printed); nothing when main goes on.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

// Writes `content` to `path`, replacing the file; false when that fails.
inline bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return static_cast<bool>(out.flush());
}

}  // namespace cacheroute::eval
