// cacheroute-synth-rates: writes a semi-synthetic `key,rate` CSV with the paper's key-rate skew
// (lognormal, σ ≈ 1.65; the CacheRoute paper, Table 6), for `cacheroutectl plan` and demos.
// The measured Gini, top-4% share and largest key share go to stderr next to the paper's targets.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/workload/lognormal_rates.h"

int main(int argc, char** argv) {
  cacheroute::workload::LognormalRatesOptions options;
  std::string output = "-";
  CLI::App app{"Write a semi-synthetic key,rate CSV (lognormal key rates) to stdout or a file."};
  app.add_option("--keys", options.keys, "number of keys")->check(CLI::Range(1ULL, 1ULL << 32));
  app.add_option("--sigma", options.sigma, "σ of log(rate); 1.65 matches the paper")
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--total-rate", options.total_rate, "sum of all rates, e.g. fleet QPS")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "random seed");
  app.add_option("--output,-o", output, "file to write, or - for stdout");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;

  std::vector<double> rates = cacheroute::workload::GenerateLognormalRates(options);
  std::ofstream file;
  if (output != "-") {
    file.open(output);
    if (!file) {
      std::cerr << "cacheroute-synth-rates: error: --output: cannot open \"" << output << "\"\n";
      return 2;
    }
  }
  std::ostream& out = output == "-" ? std::cout : file;
  const int width = static_cast<int>(std::to_string(options.keys - 1).size());
  std::string text = "key,rate\n";
  for (size_t i = 0; i < rates.size(); ++i) {
    absl::StrAppendFormat(&text, "key-%0*d,%.17g\n", width, i, rates[i]);
  }
  out << text;
  out.flush();
  if (!out) {
    std::cerr << "cacheroute-synth-rates: error: writing the output failed\n";
    return 1;
  }

  const auto s = cacheroute::workload::ComputeRateStats(rates);
  std::cerr << absl::StrFormat(
      "keys %d  total rate %.6g  gini %.3f (paper 0.756)  top-4%% share %.1f%% (paper ~47%%)  "
      "largest key %.3f%% (paper < 0.3%%)\n",
      s.keys, s.total, s.gini, 100 * s.top4_share, 100 * s.max_share);
  return 0;
}
