// Tests for tools/eval/sim/calibration: the closed-loop benchmark simulation (hand-checked at
// concurrency 1), the shipped 70B profile against the NIM benchmark it is fitted to (the figures of
// docs/references.md, copied here as literals), and the decode-line fit recovering a
// line it generated itself.
#include <catch2/catch.hpp>
#include <vector>

#include "tests/support/require_ok.h"
#include "tools/eval/sim/calibration.h"
#include "tools/eval/sim/engine_profile.h"

namespace cacheroute::sim {
namespace {

EngineProfile Must(std::string_view name) { return testing::RequireOk(FindEngineProfile(name)); }

ClosedLoopResult Bench(const EngineProfile& p, uint32_t c, uint32_t osl = 500) {
  return testing::RequireOk(
      RunClosedLoopBenchmark(p, {.concurrency = c, .input_tokens = 5000, .output_tokens = osl}));
}

TEST_CASE("at concurrency 1 the benchmark sees one prefill, then one decode step per token") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  const ClosedLoopResult r = Bench(p, 1);
  CHECK(r.mean_ttft_s == Approx(p.prefill_base_s + 5000 * p.prefill_per_token_s));
  CHECK(r.mean_itl_s == Approx(p.decode_base_s + p.decode_per_seq_s));
  CHECK(r.measured == 10);
}

TEST_CASE("the shipped 70B profile reproduces NIM's benchmark (ISL 5,000, OSL 500 assumed)") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  const ClosedLoopResult c1 = Bench(p, 1);
  CHECK(c1.mean_ttft_s == Approx(0.4068).epsilon(0.05));
  CHECK(c1.mean_itl_s == Approx(0.0186).epsilon(0.10));
  CHECK(Bench(p, 25).mean_itl_s == Approx(0.0388).epsilon(0.10));
  CHECK(Bench(p, 50).mean_itl_s == Approx(0.0597).epsilon(0.10));
}

TEST_CASE("the OSL-1000 sensitivity profile reproduces NIM's ITLs at OSL 1,000") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100-fit-osl1000");
  CHECK(Bench(p, 1, 1000).mean_itl_s == Approx(0.0186).epsilon(0.10));
  CHECK(Bench(p, 25, 1000).mean_itl_s == Approx(0.0388).epsilon(0.10));
  CHECK(Bench(p, 50, 1000).mean_itl_s == Approx(0.0597).epsilon(0.10));
}

TEST_CASE("reading ITL as decode-step time counts the benchmark's prefill stalls twice") {
  // The previous line reproduces NIM's ITLs as step times, so the simulated benchmark, which adds
  // the other clients' prefills, lands far above them at c > 1.
  const EngineProfile old = Must("llama-70b-fp8-tp2-h100-itl-as-decode");
  CHECK(Bench(old, 1).mean_itl_s == Approx(0.0186).epsilon(0.01));
  CHECK(Bench(old, 25).mean_itl_s > 1.3 * 0.0388);
  CHECK(Bench(old, 50).mean_itl_s > 1.3 * 0.0597);
}

TEST_CASE("ITL grows with concurrency and shrinks with longer outputs") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  CHECK(Bench(p, 25).mean_itl_s > Bench(p, 1).mean_itl_s);
  CHECK(Bench(p, 50).mean_itl_s > Bench(p, 25).mean_itl_s);
  // Fewer decode tokens share the same prefill stalls.
  CHECK(Bench(p, 25, 200).mean_itl_s > Bench(p, 25, 1000).mean_itl_s);
}

TEST_CASE("the fit recovers a decode line from ITLs that line produced") {
  EngineProfile truth = Must("llama-70b-fp8-tp2-h100");
  truth.decode_base_s = 0.020;
  truth.decode_per_seq_s = 0.0003;
  const ClosedLoopBenchmark shape{.input_tokens = 5000, .output_tokens = 500};
  std::vector<ItlPoint> points;
  for (uint32_t c : {1u, 25u, 50u}) points.push_back({c, Bench(truth, c).mean_itl_s});
  EngineProfile start = truth;
  start.decode_base_s = 0.010;
  start.decode_per_seq_s = 0.001;
  absl::StatusOr<DecodeFit> fit = FitDecodeLine(start, points, shape);
  REQUIRE(fit.ok());
  CHECK(fit->decode_base_s == Approx(0.020).margin(0.0005));
  CHECK(fit->decode_per_seq_s == Approx(0.0003).margin(0.00003));
  CHECK(fit->rms_error_s < 0.0002);
  CHECK_FALSE(fit->per_seq_at_zero);
  REQUIRE(fit->itl_s.size() == 3);
}

TEST_CASE("bad benchmarks and fits are rejected naming the field") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  absl::StatusOr<ClosedLoopResult> r =
      RunClosedLoopBenchmark(p, {.concurrency = 0, .input_tokens = 5000, .output_tokens = 500});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("concurrency") != std::string_view::npos);
  r = RunClosedLoopBenchmark(p, {.concurrency = 1, .input_tokens = 5000, .output_tokens = 1});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("output_tokens must be >= 2, got 1") != std::string_view::npos);
  r = RunClosedLoopBenchmark(p, {.concurrency = 1, .input_tokens = 700000, .output_tokens = 10});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("KV blocks") != std::string_view::npos);

  const std::vector<ItlPoint> one = {{25, 0.04}, {25, 0.05}};
  absl::StatusOr<DecodeFit> fit =
      FitDecodeLine(p, one, {.input_tokens = 5000, .output_tokens = 500});
  REQUIRE_FALSE(fit.ok());
  CHECK(fit.status().message().find("two or more distinct concurrencies") !=
        std::string_view::npos);
}

}  // namespace
}  // namespace cacheroute::sim
