// cacheroutectl: the operator's command-line tool (docs/cacheroutectl.md). `cacheroutectl plan`
// builds a routing plan offline from a rates file, for sizing W and q_cap, with the planner
// service's algorithm unless --algorithm names the other one; the online commands
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
#include <tuple>
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
#include "planner/algorithm.h"
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
                     "CSV file with header 'key,rate', or 'key,rate,reusable_tokens"
                     "[,prompt_tokens]' for byte-aware planning ('-' reads standard input)")
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
                     "Warm prefix slots per destination W (>= 1); required unless "
                     "--kv-budget-tokens is given")
        ->type_name("W");
    command_
        ->add_option("--kv-budget-tokens", kv_budget_tokens_,
                     "Byte-aware planning: KV tokens per destination reserved for planned "
                     "prefixes (> 0); needs the rates file's reusable_tokens column")
        ->type_name("T");
    command_
        ->add_option("--kv-capacity-tokens", kv_capacity_tokens_,
                     "Byte-aware: the engines' whole KV capacity per destination, for the chance "
                     "that a prefix survives between visits (default 0: every prefix survives)")
        ->type_name("T");
    command_
        ->add_option("--request-overhead-tokens", request_overhead_tokens_,
                     "Byte-aware: a request's decode in prefill-token equivalents (default 0)")
        ->type_name("T");
    command_
        ->add_option("--algorithm", algorithm_,
                     absl::StrCat("Planning algorithm, one of ", planner::AlgorithmNames(),
                                  "; the default is the planner service's"))
        ->type_name("NAME")
        ->capture_default_str();
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
    const bool byte_aware = !kv_budget_tokens_.empty();
    if (slots_per_destination_.empty() && !byte_aware) {
      return absl::InvalidArgumentError(
          "--slots-per-destination: required (or --kv-budget-tokens for byte-aware planning)");
    }
    uint64_t slots = 1;  // unused by byte-aware plans
    if (!slots_per_destination_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(
          slots, ParseIntFlag<uint64_t>("--slots-per-destination", slots_per_destination_, 1));
    }
    absl::StatusOr<planner::Algorithm> algorithm = planner::ParseAlgorithm(algorithm_);
    if (!algorithm.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--algorithm: ", algorithm.status().message()));
    }
    if (byte_aware && !planner::PlansByteAware(*algorithm)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv-budget-tokens: byte-aware planning is algorithm \"",
          std::string(planner::AlgorithmName(planner::Algorithm::kCacheRoute)), "\"'s; \"",
          algorithm_, "\" plans by slots (give --slots-per-destination instead)"));
    }
    planner::PlanConfig plan_config = planner::PlanConfigFor(
        *algorithm, {.destinations = destinations, .q_cap = q_cap, .slots_per_destination = slots});
    if (byte_aware) {
      CACHEROUTE_ASSIGN_OR_RETURN(plan_config.kv_budget_tokens,
                                  ParsePositiveFlag("--kv-budget-tokens", kv_budget_tokens_));
      for (const auto& [flag, text, field] :
           {std::tuple{"--kv-capacity-tokens", &kv_capacity_tokens_,
                       &plan_config.kv_capacity_tokens},
            std::tuple{"--request-overhead-tokens", &request_overhead_tokens_,
                       &plan_config.request_overhead_tokens}}) {
        if (text->empty()) continue;
        CACHEROUTE_ASSIGN_OR_RETURN(*field, ParseNonNegativeFlag(flag, *text));
      }
    } else if (!kv_capacity_tokens_.empty() || !request_overhead_tokens_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kv_capacity_tokens_.empty() ? "--request-overhead-tokens" : "--kv-capacity-tokens",
          ": needs --kv-budget-tokens (byte-aware planning)"));
    }
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
    if (byte_aware && csv->tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(rates_path_ == "-" ? "<stdin>" : rates_path_,
                       ": --kv-budget-tokens needs the reusable_tokens column (header "
                       "'key,rate,reusable_tokens[,prompt_tokens]')"));
    }
    const RankedRates ranked = RankKeys(*std::move(csv));

    base::RealClock clock;
    absl::StatusOr<planner::Plan> plan =
        planner::BuildPlan(ranked.rates, plan_config, &clock, nullptr, {}, ranked.tokens);
    if (!plan.ok()) return plan.status();
    if (byte_aware && !plan->stats().byte_aware) {
      return absl::InvalidArgumentError(
          absl::StrCat(rates_path_ == "-" ? "<stdin>" : rates_path_,
                       ": --kv-budget-tokens needs at least one key with reusable_tokens"));
    }

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
  std::string kv_budget_tokens_;
  std::string kv_capacity_tokens_;
  std::string request_overhead_tokens_;
  std::string algorithm_ = std::string(planner::AlgorithmName(planner::kDefaultAlgorithm));
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
