// Test-only: runs a program with arguments through the shell, standard input from a string, and
// returns its exit code, standard output and standard error (captured in files of a TempDir).
//
// Usage:
//   CommandResult r = RunCommand(CACHEROUTE_WORKLOAD_PATH, {"generate", "--qps", "-1"});
//   CHECK(r.exit_code == 2);
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace cacheroute::testing {

inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CommandResult RunCommand(const std::string& program, const std::vector<std::string>& args,
                                const std::string& stdin_text = "") {
  TempDir io("run_command");
  const std::string in = io.Write("stdin", stdin_text);
  std::string command = ShellQuote(program);
  for (const std::string& arg : args) {
    command += ' ';  // two appends: `" " + ShellQuote(arg)` trips GCC 12's -Wrestrict (bug 105329)
    command += ShellQuote(arg);
  }
  command += " <" + ShellQuote(in) + " >" + ShellQuote(io.File("stdout")) + " 2>" +
             ShellQuote(io.File("stderr"));
  const int status = std::system(command.c_str());
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  CommandResult result;
  result.exit_code = WEXITSTATUS(status);
  result.out = io.Read("stdout");
  result.err = io.Read("stderr");
  return result;
}

}  // namespace cacheroute::testing
