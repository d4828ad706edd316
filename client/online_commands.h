// The online subcommands of cacheroutectl: they talk to a running planner over gRPC
// (proto/cacheroute/v1) instead of planning from a file. docs/cacheroutectl.md documents each.
//
//   push-rates   RateService.ReportRates from a key,rate or key,count CSV file
//   status       AdminService.GetStatus
//   show         TableService.GetTable, rendered like `plan`
//   explain      AdminService.Explain
//   diff         AdminService.Diff
//   watch        TableService.StreamTable as a gateway would (TableClientState), one line per
//                version
//   replan, drain, undrain, destinations set|list
//
// The global options (--planner, --token, --tls-ca, --format, with CACHEROUTE_PLANNER and
// CACHEROUTE_TOKEN as defaults) are declared on the top-level app by AddGlobalOptions; each
// online subcommand also accepts them after its name.
//
// Usage (cacheroutectl.cc):
//   GlobalOptions global;
//   AddGlobalOptions(app, &global);
//   AddOnlineCommands(app, global, &commands);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/command.h"

namespace cacheroute::client {

struct GlobalOptions {
  std::string planner = "127.0.0.1:50051";
  std::string token;
  std::string tls_ca;
  std::string format = "table";
};

void AddGlobalOptions(CLI::App& app, GlobalOptions* options);

// `options` must outlive the commands; it is read when a command runs, after parsing.
void AddOnlineCommands(CLI::App& app, const GlobalOptions& options,
                       std::vector<std::unique_ptr<Command>>* commands);

}  // namespace cacheroute::client
