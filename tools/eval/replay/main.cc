// cacheroute-replay: replays a workload (the generator's JSONL or a Mooncake trace) open-loop
// against OpenAI-compatible endpoints, routing it itself with a shipped policy or through a
// gateway (or through endpoint pickers, playing Envoy's ext_proc filter), and reports served KV
// hit, TTFT and latency percentiles, failures, requests shed (429), goodput within --slo and
// per-destination load (docs/replay.md).
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/replay/http_replay.h"
#include "tools/eval/replay/replay.h"

namespace {

constexpr cacheroute::eval::Program kProgram{"cacheroute-replay"};

using cacheroute::eval::WriteFile;

}  // namespace

int main(int argc, char** argv) {
  using namespace cacheroute::replay;

  std::string workload_path, gateway, engines, pickers, json_path, assignments_path, prompt_mode = "words";
  std::optional<uint32_t> key_blocks;
  LoadOptions load;
  RoutingOptions routing;
  HttpReplayOptions http;
  bool plan_from_workload = false, no_stream = false, dry_run = false;
  double slo_s = 0;

  CLI::App app{"cacheroute-replay: replay a workload open-loop against model servers"};
  app.add_option("--workload", workload_path,
                 "Generator JSONL or Mooncake-format trace (one JSON object per line)")
      ->required();
  app.add_option("--key-blocks", key_blocks,
                 "Routing key = the first N hash ids (default: a line's \"key\", else 2 ids)");
  auto* gw = app.add_option("--gateway", gateway,
                            "Send everything to this gateway URL (it routes on X-CacheRoute-Key); "
                            "several, comma-separated: the requests are dealt to them in turn, "
                            "as a load balancer in front of gateway replicas would");
  auto* en = app.add_option("--engines", engines,
                            "Comma-separated engine URLs; the replay routes with --policy");
  auto* ep = app.add_option(
      "--ext-proc", pickers,
      "Comma-separated endpoint pickers' gRPC addresses (HOST:PORT): the requests are dealt to "
      "them in turn; each goes through its picker's ext_proc stream as Envoy's filter sends it "
      "(FULL_DUPLEX_STREAMED), then to the endpoint the picker named (docs/replay.md)");
  bool header_value = false;
  app.add_flag("--ext-proc-header-value", header_value,
               "With --ext-proc: header values in HeaderValue.value, both ways, as an Envoy with "
               "envoy.reloadable_features.send_header_raw_value off (default: raw_value)");
  gw->excludes(en);
  ep->excludes(gw);
  ep->excludes(en);
  app.add_option(
         "--policy", routing.policy,
         "Routing policy, with --engines:\n" + cacheroute::dataplane::BuiltinPolicies().Listing())
      ->capture_default_str();
  app.add_option("--seed", routing.seed, "Seed of the policies' randomness")->capture_default_str();
  app.add_flag("--plan-from-workload", plan_from_workload,
               "cacheroute: build the plan offline from the workload's own key rates");
  app.add_option("--q-cap", routing.q_cap,
                 "cacheroute plan: per-assignment load cap in requests/s (0: total rate / R)")
      ->capture_default_str();
  app.add_option("--slots-per-destination", routing.slots_per_destination,
                 "cacheroute plan: warm slots W per destination")
      ->capture_default_str();
  app.add_option("--speedup", load.speedup, "Divide the trace's arrival times by this")
      ->capture_default_str();
  app.add_option("--qps", load.qps, "Rescale arrivals to this request rate (0: keep)")
      ->capture_default_str();
  app.add_option("--duration", load.duration_s,
                 "Replay only requests arriving in the first this many seconds (0: all)")
      ->capture_default_str();
  app.add_option("--concurrency", http.concurrency,
                 "Open requests at most; arrivals beyond it fail as \"rejected\"")
      ->capture_default_str();
  app.add_option("--timeout", http.timeout_s, "Seconds to connect, and without a byte, per request")
      ->capture_default_str();
  app.add_option("--slo", slo_s,
                 "TTFT objective in seconds: report goodput, the successes with TTFT <= it per "
                 "second (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-stream", no_stream, "Non-streaming requests (TTFT = latency)");
  app.add_option("--model", http.model, "The model field (default: asked from /v1/models)");
  app.add_option("--prompt", prompt_mode,
                 "words: synthetic text with the trace's prefix sharing (real engines); stub: "
                 "one word, prefix sharing only through the emulator extension fields")
      ->check(CLI::IsMember({"words", "stub"}))
      ->capture_default_str();
  app.add_option("--json", json_path, "Also write the report as JSON to this file");
  app.add_option("--assignments", assignments_path,
                 "Write index,key,destination per request (CSV) to this file");
  app.add_flag("--dry-run", dry_run,
               "Route only (loads as if every request ended at once); "
               "send nothing");
  CLI11_PARSE(app, argc, argv);

  load.key_blocks = key_blocks;
  http.stream = !no_stream;
  if (header_value) {
    if (pickers.empty()) return kProgram.Fail(2, "--ext-proc-header-value needs --ext-proc");
    http.picker_header_value = true;
  }
  http.prompt = prompt_mode == "stub" ? PromptMode::kStub : PromptMode::kWords;
  std::vector<std::string> targets;
  for (const auto& part :
       absl::StrSplit(gateway.empty() ? engines : gateway, ',', absl::SkipWhitespace())) {
    targets.push_back(NormalizeUrl(std::string(part)));
  }
  for (const auto& part : absl::StrSplit(pickers, ',', absl::SkipWhitespace())) {
    http.pickers.emplace_back(part);
  }
  const bool fronted = !gateway.empty() || !http.pickers.empty();  // routed by someone else
  if (targets.empty() && http.pickers.empty()) {
    return kProgram.Fail(2, "give --gateway URL, --ext-proc HOST:PORT or --engines URL1,URL2,...");
  }
  const cacheroute::dataplane::PolicyInfo* policy =
      cacheroute::dataplane::BuiltinPolicies().Find(routing.policy);
  if (policy != nullptr && policy->uses_table && !plan_from_workload) {
    return kProgram.Fail(2,
                         "--policy " + routing.policy + " needs a plan: pass --plan-from-workload");
  }
  http.targets = targets;

  absl::StatusOr<cacheroute::workload::Workload> workload = LoadReplayWorkload(workload_path, load);
  if (!workload.ok()) return kProgram.Fail(2, std::string(workload.status().message()));

  std::unique_ptr<Dispatcher> dispatcher;
  if (!fronted) {
    routing.destinations = static_cast<uint32_t>(targets.size());
    absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(routing, *workload);
    if (!d.ok()) return kProgram.Fail(2, std::string(d.status().message()));
    dispatcher = *std::move(d);
  }

  HttpReplayResult result;
  if (dry_run) {
    if (dispatcher == nullptr) {
      return kProgram.Fail(2, "--dry-run routes with --engines, not --gateway or --ext-proc");
    }
    for (const cacheroute::workload::Request& r : workload->requests) {
      Outcome o;
      Dispatcher::Ticket ticket = dispatcher->Pick(r, workload->block_size);
      o.destination = ticket.destination;
      dispatcher->Done(ticket);
      result.outcomes.push_back(o);
    }
  } else {
    if (http.model.empty() && !targets.empty()) {
      http.model = DiscoverModel(targets[0], http.timeout_s);
    }
    result = RunHttpReplay(*workload, dispatcher.get(), http);
  }

  ReplayReport report = BuildReport(
      result.outcomes, dispatcher != nullptr ? targets : std::vector<std::string>{}, result.wall_s,
      slo_s);
  report.policy = dispatcher != nullptr ? routing.policy
                  : http.pickers.empty() ? "gateway"
                                         : "endpoint-picker";
  if (dispatcher != nullptr) report.plan = dispatcher->plan();
  if (dry_run) std::cout << "Dry run: routing decisions only, nothing was sent\n";
  std::cout << FormatReportTable(report);
  if (!json_path.empty() && !WriteFile(json_path, FormatReportJson(report))) {
    return kProgram.Fail(1, "cannot write --json " + json_path);
  }
  if (!assignments_path.empty()) {
    std::string csv = "index,key,destination\n";
    for (size_t i = 0; i < result.outcomes.size(); ++i) {
      const uint32_t d = result.outcomes[i].destination;
      csv += std::to_string(i) + "," + workload->requests[i].key + "," +
             (d == cacheroute::dataplane::kNoDestination ? std::string() : std::to_string(d)) +
             "\n";
    }
    if (!WriteFile(assignments_path, csv)) return kProgram.Fail(1, "cannot write --assignments");
  }
  return 0;
}
