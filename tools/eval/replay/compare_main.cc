// cacheroute-replay-compare: puts cacheroute-replay runs side by side (paper §5.3, the shadow
// replay gate: the same trace under the candidate plan and under Flat-LB).
//
//   cacheroute-replay-compare LABEL=report.json LABEL=report.json ... [--out DIR] [--title T]
//
// LABEL=a.json,b.json,c.json: repeats of one set-up, shown as their medians (MedianRun).
//
// Prints the comparison; with --out writes DIR/report.md, DIR/kv-hit.svg, DIR/ttft-p99.svg and
// DIR/destination-load.svg. Exit 2 for bad arguments or an unreadable report, naming it.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/replay/compare.h"

namespace {

constexpr cacheroute::eval::Program kProgram{"cacheroute-replay-compare"};

using cacheroute::eval::WriteFile;

}  // namespace

int main(int argc, char** argv) {
  using namespace cacheroute::replay;
  CLI::App app{"Compare cacheroute-replay runs side by side"};
  std::vector<std::string> specs;
  std::string out_dir;
  std::string title = "Replay comparison";
  app.add_option("runs", specs,
                 "LABEL=FILE: a cacheroute-replay --json report; LABEL=FILE,FILE,...: repeats "
                 "of one set-up, shown as their medians")
      ->required();
  app.add_option("--out", out_dir, "Write report.md and SVG charts into this directory");
  app.add_option("--title", title, "Title of report.md");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;

  std::vector<ReplayRun> runs;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return kProgram.Fail(2, "runs: expected LABEL=FILE, got \"" + spec + "\"");
    }
    const std::string label = spec.substr(0, eq);
    std::vector<ReplayRun> repeats;
    const std::vector<std::string> paths =
        absl::StrSplit(spec.substr(eq + 1), ',', absl::SkipEmpty());
    for (const std::string& path : paths) {
      std::ifstream in(path);
      if (!in) return kProgram.Fail(2, label + ": cannot read " + path);
      std::stringstream text;
      text << in.rdbuf();
      absl::StatusOr<ReplayRun> run = ReadRun(label, text.str());
      if (!run.ok()) {
        return kProgram.Fail(2, label + ": " + path + ": " + std::string(run.status().message()));
      }
      repeats.push_back(*std::move(run));
    }
    if (repeats.empty()) return kProgram.Fail(2, "runs: no file in \"" + spec + "\"");
    absl::StatusOr<ReplayRun> run =
        repeats.size() == 1
            ? repeats.front()
            : MedianRun(absl::StrCat(label, " (median of ", repeats.size(), ")"), repeats);
    runs.push_back(*std::move(run));
  }
  std::cout << CompareTable(runs);
  if (out_dir.empty()) return 0;

  std::vector<std::string> labels;
  std::vector<double> kv_hit, p99;
  for (const ReplayRun& r : runs) {
    labels.push_back(r.label);
    kv_hit.push_back(100 * r.kv_hit);
    p99.push_back(r.ttft_p99_s);
  }
  const bool ok =
      WriteFile(out_dir + "/report.md", CompareMarkdown(runs, title)) &&
      WriteFile(out_dir + "/kv-hit.svg", BarChartSvg("Served KV hit", labels, kv_hit, "%")) &&
      WriteFile(out_dir + "/ttft-p99.svg", BarChartSvg("TTFT p99", labels, p99, " s")) &&
      WriteFile(out_dir + "/destination-load.svg", DestinationLoadSvg(runs));
  if (!ok) return kProgram.Fail(1, "cannot write into --out " + out_dir);
  std::cout << "report: " << out_dir << "/report.md\n";
  return 0;
}
