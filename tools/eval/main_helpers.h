// What the command-line programs of tools/eval share in main(): the exit codes of parsing their
// arguments, their error lines, and writing an output file whole. Header-only: each program
// links CLI11 already.
//
//   constexpr Program kProgram{"cacheroute-x"};
//   if (std::optional<int> code = ParseCommandLine(app, argc, argv)) return *code;
//   if (!ok) return kProgram.Fail(2, "--flag: what is wrong");
#pragma once

#include <fstream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"
#include "base/program.h"

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

// A program's error line: Fail prints "<name>: error: <message>" on stderr and returns `code`
// (2: bad arguments or input; 1: the run failed) for main to return.
struct Program {
  absl::string_view name;
  int Fail(int code, absl::string_view message) const {
    return base::program::Fail(name, code, message);
  }
};

// Writes `content` to `path`, replacing the file; false when that fails.
inline bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return static_cast<bool>(out.flush());
}

}  // namespace cacheroute::eval
