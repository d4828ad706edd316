// cacheroutectl: the operator's command-line tool (docs/cacheroutectl.md). `cacheroutectl plan`
// builds a routing plan offline from a rates file, for sizing W and q_cap; the online commands
// (online_commands.h: push-rates, status, show, explain, diff, watch, replan, drain, undrain,
// destinations) talk to a running planner chosen by the global options before the command.
//
// Each subcommand is a Command (command.h) that declares its flags on a CLI11 subcommand and runs
// after parsing; to add one, write another Command and append it in Main. CLI11 exceptions stay
// in Main: everything else reports errors as absl::Status.
//
// Exit codes (command.h): 0 success, 2 bad input (usage, flag values, unreadable or malformed
// rates file, inputs the planner rejects), 3 planner unreachable or not answering, 4 refused by
// the planner (token), 1 internal error. Errors are one line on stderr, prefixed
// "cacheroutectl: error: ". Output goes to stdout only once it is complete.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "client/command.h"
#include "client/online_commands.h"
#include "client/plan_output.h"
#include "client/rates_csv.h"
#include "client/text_format.h"
#include "planner/plan_builder.h"

namespace cacheroute::client {
namespace {

constexpr absl::string_view kProgram = "cacheroutectl";
// Beyond this the planner's sums could overflow a double; no real fleet comes near it.
constexpr double kMaxTotalRate = 1e300;

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
    CACHEROUTE_ASSIGN_OR_RETURN(uint32_t destinations,
                                ParseIntFlag<uint32_t>("--destinations", destinations_, 1));
    CACHEROUTE_ASSIGN_OR_RETURN(double q_cap, ParsePositiveFlag("--q-cap", q_cap_));
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t slots, ParseIntFlag<uint64_t>("--slots-per-destination",
                                                                       slots_per_destination_, 1));
    absl::StatusOr<OutputFormat> format = ParseOutputFormat(format_);
    if (!format.ok())
      return absl::InvalidArgumentError(absl::StrCat("--format: ", format.status().message()));
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t top, ParseIntFlag<uint64_t>("--top", top_, 0));

    CACHEROUTE_ASSIGN_OR_RETURN(std::string text, ReadRatesFile(rates_path_));
    absl::StatusOr<RatesCsv> csv = ParseRatesCsv(text);
    if (!csv.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(rates_path_ == "-" ? "<stdin>" : rates_path_, ": ", csv.status().message()));
    }
    text.clear();
    text.shrink_to_fit();
    double total_rate = 0.0;
    for (const double rate : csv->rates) total_rate += rate;
    if (!(total_rate <= kMaxTotalRate)) {
      return absl::InvalidArgumentError(absl::StrCat("--rates: the rates sum to ",
                                                     ShortestDouble(total_rate), ", more than ",
                                                     ShortestDouble(kMaxTotalRate)));
    }
    const RankedRates ranked = RankKeys(*std::move(csv));

    base::RealClock clock;
    absl::StatusOr<planner::Plan> plan = planner::BuildPlan(
        ranked.rates,
        {.destinations = destinations, .q_cap = q_cap, .slots_per_destination = slots}, &clock);
    if (!plan.ok()) return plan.status();

    absl::StatusOr<std::string> output =
        FormatPlan(*plan, ranked.key_names, {.format = *format, .top = static_cast<size_t>(top)});
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

void PrintError(absl::string_view message) {
  std::fprintf(stderr, "%s: error: %s\n", std::string(kProgram).c_str(),
               absl::StrReplaceAll(message, {{"\n", " "}}).c_str());
}

int Main(int argc, char** argv) {
  CLI::App app{
      "Operator tool for CacheRoute: plan offline, or inspect and steer a running planner.",
      std::string(kProgram)};
  app.require_subcommand(1);
  GlobalOptions global;
  AddGlobalOptions(app, &global);
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(std::make_unique<PlanCommand>(app));
  AddOnlineCommands(app, global, &commands);

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
      PrintError(ExitCode(status) == kExitInternal ? status.ToString() : status.message());
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
