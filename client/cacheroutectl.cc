// cacheroutectl: the operator's command-line tool. `cacheroutectl plan` builds a routing plan
// offline from a rates file, for sizing W and q_cap (docs/cacheroutectl.md).
//
// Each subcommand is a Command that declares its flags on a CLI11 subcommand and runs after
// parsing; to add one, write another Command and append it in Main. CLI11 exceptions stay in
// Main: everything else reports errors as absl::Status.
//
// Exit codes: 0 success, 2 bad input (usage, flag values, unreadable or malformed rates file,
// inputs the planner rejects), 1 internal error. Errors are one line on stderr, prefixed
// "cacheroutectl: error: ". Output goes to stdout only once it is complete.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "client/plan_output.h"
#include "client/rates_csv.h"
#include "client/text_format.h"
#include "planner/clock.h"
#include "planner/plan_builder.h"

namespace cacheroute::client {
namespace {

constexpr absl::string_view kProgram = "cacheroutectl";
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;
// Beyond this the planner's sums could overflow a double; no real fleet comes near it.
constexpr double kMaxTotalRate = 1e300;

class Command {
 public:
  virtual ~Command() = default;
  // True if this command's subcommand was selected on the command line.
  virtual bool Selected() const = 0;
  virtual absl::Status Run() = 0;
};

absl::Status FlagError(absl::string_view flag, absl::string_view expected,
                       absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": expected ", expected, ", got ", QuoteForMessage(value)));
}

template <typename Int>
absl::StatusOr<Int> ParseIntFlag(absl::string_view flag, absl::string_view value, Int min) {
  Int parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || parsed < min) {
    return FlagError(
        flag, absl::StrCat("an integer in [", min, ", ", std::numeric_limits<Int>::max(), "]"),
        value);
  }
  return parsed;
}

absl::StatusOr<double> ParsePositiveFlag(absl::string_view flag, absl::string_view value) {
  double parsed = 0.0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(parsed) ||
      parsed <= 0) {
    return FlagError(flag, "a finite number > 0", value);
  }
  return parsed;
}

absl::StatusOr<std::string> ReadAll(std::FILE* file, absl::string_view name) {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  if (std::ferror(file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rates: cannot read ", name, ": ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  return text;
}

// `path` "-" is standard input.
absl::StatusOr<std::string> ReadRatesFile(const std::string& path) {
  if (path == "-") return ReadAll(stdin, "standard input");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rates: cannot open ", QuoteForMessage(path), ": ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  absl::StatusOr<std::string> text = ReadAll(file, QuoteForMessage(path));
  std::fclose(file);
  return text;
}

absl::Status WriteStdout(absl::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write to standard output: ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  return absl::OkStatus();
}

class PlanCommand final : public Command {
 public:
  explicit PlanCommand(CLI::App& app) {
    command_ = app.add_subcommand(
        "plan", "Build a routing plan from a rates file and print it (table, json or csv).");
    command_
        ->add_option("--rates", rates_path_,
                     "CSV file with header 'key,rate' ('-' reads standard input)")
        ->required()
        ->type_name("FILE");
    command_->add_option("--destinations", destinations_, "Number of destinations R (>= 1)")
        ->required()
        ->type_name("R");
    command_
        ->add_option("--q-cap", q_cap_,
                     "Per-assignment load cap q_cap, in the unit of the rates (> 0)")
        ->required()
        ->type_name("Q");
    command_
        ->add_option("--slots-per-destination", slots_per_destination_,
                     "Warm prefix slots per destination W (>= 1)")
        ->required()
        ->type_name("W");
    command_->add_option("--format", format_, "Output format: table, json or csv")
        ->type_name("FORMAT")
        ->capture_default_str();
    command_->add_option("--top", top_, "Table only: how many of the hottest keys to list")
        ->type_name("N")
        ->capture_default_str();
  }

  bool Selected() const override { return command_->parsed(); }

  absl::Status Run() override {
    absl::StatusOr<uint32_t> destinations =
        ParseIntFlag<uint32_t>("--destinations", destinations_, 1);
    if (!destinations.ok()) return destinations.status();
    absl::StatusOr<double> q_cap = ParsePositiveFlag("--q-cap", q_cap_);
    if (!q_cap.ok()) return q_cap.status();
    absl::StatusOr<uint64_t> slots =
        ParseIntFlag<uint64_t>("--slots-per-destination", slots_per_destination_, 1);
    if (!slots.ok()) return slots.status();
    absl::StatusOr<OutputFormat> format = ParseOutputFormat(format_);
    if (!format.ok())
      return absl::InvalidArgumentError(absl::StrCat("--format: ", format.status().message()));
    absl::StatusOr<uint64_t> top = ParseIntFlag<uint64_t>("--top", top_, 0);
    if (!top.ok()) return top.status();

    absl::StatusOr<std::string> text = ReadRatesFile(rates_path_);
    if (!text.ok()) return text.status();
    absl::StatusOr<RatesCsv> csv = ParseRatesCsv(*text);
    if (!csv.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(rates_path_ == "-" ? "<stdin>" : rates_path_, ": ", csv.status().message()));
    }
    text->clear();
    text->shrink_to_fit();
    double total_rate = 0.0;
    for (const double rate : csv->rates) total_rate += rate;
    if (!(total_rate <= kMaxTotalRate)) {
      return absl::InvalidArgumentError(absl::StrCat("--rates: the rates sum to ",
                                                     ShortestDouble(total_rate), ", more than ",
                                                     ShortestDouble(kMaxTotalRate)));
    }
    const RankedRates ranked = RankKeys(*std::move(csv));

    planner::RealClock clock;
    absl::StatusOr<planner::Plan> plan = planner::BuildPlan(
        ranked.rates,
        {.destinations = *destinations, .q_cap = *q_cap, .slots_per_destination = *slots}, &clock);
    if (!plan.ok()) return plan.status();

    absl::StatusOr<std::string> output =
        FormatPlan(*plan, ranked.key_names, {.format = *format, .top = static_cast<size_t>(*top)});
    if (!output.ok()) return output.status();
    return WriteStdout(*output);
  }

 private:
  CLI::App* command_ = nullptr;
  std::string rates_path_;
  std::string destinations_;
  std::string q_cap_;
  std::string slots_per_destination_;
  std::string format_ = "table";
  std::string top_ = "10";
};

int ExitCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
      return kExitBadInput;
    default:
      return kExitInternal;
  }
}

void PrintError(absl::string_view message) {
  std::fprintf(stderr, "%s: error: %s\n", std::string(kProgram).c_str(),
               absl::StrReplaceAll(message, {{"\n", " "}}).c_str());
}

int Main(int argc, char** argv) {
  CLI::App app{"Operator tool for CacheRoute prefix-affinity routing plans.",
               std::string(kProgram)};
  app.require_subcommand(1);
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(std::make_unique<PlanCommand>(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    PrintError(e.what());
    return kExitBadInput;
  }

  for (const std::unique_ptr<Command>& command : commands) {
    if (!command->Selected()) continue;
    const absl::Status status = command->Run();
    if (!status.ok()) {
      PrintError(ExitCode(status) == kExitBadInput ? status.message() : status.ToString());
    }
    return ExitCode(status);
  }
  PrintError("no subcommand given");
  return kExitBadInput;
}

}  // namespace
}  // namespace cacheroute::client

int main(int argc, char** argv) {
  try {
    return cacheroute::client::Main(argc, argv);
  } catch (const std::exception& e) {
    cacheroute::client::PrintError(absl::StrCat("internal error: ", e.what()));
  } catch (...) {
    cacheroute::client::PrintError("internal error: unknown exception");
  }
  return 1;
}
