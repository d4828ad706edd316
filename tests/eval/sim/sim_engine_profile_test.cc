// Tests for tools/eval/sim/engine_profile: the profiles reproduce the measurements they were
// calibrated from (docs/references.md, copied here as literals), and bad profiles are rejected.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "tests/support/require_ok.h"
#include "tools/eval/sim/engine_profile.h"

namespace cacheroute::sim {
namespace {

EngineProfile Must(std::string_view name) { return testing::RequireOk(FindEngineProfile(name)); }

TEST_CASE("the 70B profile's prefill line and limits come from the NIM benchmark and the paper") {
  // Its decode line is checked against the simulated benchmark in sim_calibration_test.
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  CHECK(p.IterationSeconds(5000, 0, 0) == Approx(0.4068).margin(0.002));  // TTFT at 5,000 tokens
  CHECK(p.IterationSeconds(1000, 0, 0) == Approx(0.008 + 0.080));
  CHECK(p.IterationSeconds(0, 1, 0) == Approx(0.0186).margin(0.0001));  // ITL at concurrency 1
  CHECK(p.kv_blocks == 40071);
  CHECK(p.token_budget == 8192);
  CHECK(p.max_running == 1024);
}

TEST_CASE("the itl-as-decode profile is the NIM ITL line read as decode-step times") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100-itl-as-decode");
  CHECK(p.IterationSeconds(5000, 0, 0) == Approx(0.4068).margin(0.002));
  CHECK(p.IterationSeconds(0, 1, 0) == Approx(0.0186).margin(0.0001));
  CHECK(p.IterationSeconds(0, 25, 0) == Approx(0.0388).margin(0.0001));
  CHECK(p.IterationSeconds(0, 50, 0) == Approx(0.0597).margin(0.0001));
  CHECK(p.kv_blocks == 40071);
  CHECK(p.token_budget == 8192);
  CHECK(p.max_running == 1024);
}

TEST_CASE("a mixed iteration pays one base and every token") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100");
  CHECK(p.IterationSeconds(0, 0, 0) == 0);
  CHECK(p.IterationSeconds(100, 10, 5000) ==
        Approx(p.decode_base_s + 100 * p.prefill_per_token_s + 10 * p.decode_per_seq_s));
}

TEST_CASE("the 8B profile follows Vidur's per-iteration and per-token costs") {
  const EngineProfile p = Must("llama-8b-h100");
  CHECK(p.IterationSeconds(8192, 0, 0) == Approx(0.0056 + 8192 * 20e-6));
  CHECK(p.IterationSeconds(0, 100, 120000) == Approx(0.0056 + 100 * 20e-6 + 120000 * 39e-9));
  CHECK(p.kv_blocks == 28000);
}

TEST_CASE("every named profile is valid and unknown names are rejected") {
  for (const std::string& name : EngineProfileNames()) {
    INFO(name);
    CHECK(ValidateEngineProfile(Must(name)).ok());
  }
  absl::StatusOr<EngineProfile> missing = FindEngineProfile("gpt-5");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message().find("gpt-5") != std::string_view::npos);
}

TEST_CASE("bad profiles are rejected with the field and the value named") {
  EngineProfile p = Must("llama-8b-h100");
  p.decode_per_seq_s = -1;
  absl::Status s = ValidateEngineProfile(p);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("decode_per_seq_s") != std::string_view::npos);
  CHECK(s.message().find("-1") != std::string_view::npos);

  p = Must("llama-8b-h100");
  p.prefill_base_s = std::numeric_limits<double>::quiet_NaN();
  CHECK(ValidateEngineProfile(p).message().find("prefill_base_s") != std::string_view::npos);

  p = Must("llama-8b-h100");
  p.kv_blocks = 0;
  CHECK(ValidateEngineProfile(p).message().find("kv_blocks") != std::string_view::npos);

  p = Must("llama-8b-h100");
  p.token_budget = 512;
  CHECK(ValidateEngineProfile(p).message().find(
            "token_budget must be >= max_running (1024), got 512") != std::string_view::npos);
}

TEST_CASE("saturation rate: one over the work a request brings") {
  const EngineProfile p = Must("llama-70b-fp8-tp2-h100-itl-as-decode");
  // 1,200-token prompts with 400 uncached, 100 output tokens: 0.080·400 + 100·0.8388 ms.
  const double work = 400 * 0.080e-3 + 100 * 0.8388e-3;
  CHECK(SaturationQps(p, 1200, 400, 100) == Approx(1 / work));
  CHECK(CalibrateQCap(p, 1200, 400, 100) == Approx(0.8 / work));
  CHECK(CalibrateQCap(p, 1200, 400, 100, 0.5) == Approx(0.5 / work));
  CHECK(std::isinf(SaturationQps(p, 0, 0, 0)));
}

}  // namespace
}  // namespace cacheroute::sim
