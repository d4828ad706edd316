// cacheroute-fuzz-seeds OUT_DIR: writes the binary seed inputs of the fuzz targets (serialised
// protobuf messages) under OUT_DIR/<target>/, from the real producers: a PlannerCore's published
// table, its persisted state file, ComputeDelta and Chunk. Run once to refresh
// tests/fuzz/corpus/ (docs/fuzzing.md); the text seeds there are written by hand.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/v1/rates.pb.h"
#include "cacheroute/v1/table.pb.h"
#include "planner/key_id.h"
#include "planner/service/planner_core.h"
#include "planner/service/proto_convert.h"
#include "proto/table/chunking.h"
#include "proto/table/table_snapshot.h"
#include "tests/support/rate_reports.h"

namespace {

namespace fs = std::filesystem;
using namespace cacheroute;

// Must match kSeparator in table_fuzz.cc.
constexpr char kSeparator[] = "\n--cacheroute-fuzz--\n";

void Write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  std::cout << path.string() << " (" << bytes.size() << " bytes)\n";
}

// A report of the 10 s window [1'800'000'000'000 ms, 1'800'000'010'000 ms) with 3 other requests.
v1::ReportRatesRequest Report(const std::string& gateway, uint64_t sequence,
                              const std::vector<std::pair<std::string, double>>& counts) {
  v1::ReportRatesRequest r = testing::MakeRateReport(
      gateway, sequence, absl::FromUnixMillis(1'800'000'010'000), counts);
  r.set_other_count(3);
  return r;
}

planner::RateReport ToReport(const v1::ReportRatesRequest& r) {
  return service::ToRateReport(r);
}

std::string Serialized(const google::protobuf::Message& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: cacheroute-fuzz-seeds OUT_DIR\n";
    return 2;
  }
  const fs::path out = argv[1];

  // rate_report: a few reports as gateways send them.
  const v1::ReportRatesRequest r1 =
      Report("gw-1", 1, {{"tenant-a", 500}, {"tenant-b", 120}, {"tenant-c", 7}});
  v1::ReportRatesRequest r2 = Report("gw-2", 42, {{"tenant-a", 30}});
  r2.mutable_counts(0)->set_prompt_tokens(1024);
  const v1::ReportRatesRequest r3 = Report("gw-3", 7, {});
  Write(out / "rate_report" / "three-keys.pb", Serialized(r1));
  Write(out / "rate_report" / "prompt-tokens.pb", Serialized(r2));
  Write(out / "rate_report" / "other-only.pb", Serialized(r3));

  // A planner with a state directory: two published versions and its state file.
  const fs::path state_dir = fs::temp_directory_path() / "cacheroute-fuzz-seeds-state";
  fs::remove_all(state_dir);
  base::ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  service::PlannerConfig config;
  config.destinations = {"d0", "d1", "d2", "d3"};
  config.q_cap = 10;
  config.slots_per_destination = 4;
  config.state_dir = state_dir.string();
  auto core = service::PlannerCore::Create(config, &clock);
  if (!core.ok()) {
    std::cerr << core.status() << "\n";
    return 1;
  }
  (void)(*core)->ReportRates(ToReport(r1));
  clock.Advance(absl::Seconds(10));
  (void)(*core)->Replan();
  const auto first = (*core)->Latest();
  (void)(*core)->ReportRates(ToReport(Report("gw-1", 2, {{"tenant-d", 900}, {"tenant-a", 10}})));
  (void)(*core)->Drain("d3", false);
  clock.Advance(absl::Seconds(30));
  (void)(*core)->Replan();
  const auto second = (*core)->Latest();
  if (first == nullptr || second == nullptr || first->version() == second->version()) {
    std::cerr << "expected two versions\n";
    return 1;
  }
  std::ifstream state_in(state_dir / service::StateStore::kFileName, std::ios::binary);
  Write(out / "state_file" / "planner-state.pb",
        std::string(std::istreambuf_iterator<char>(state_in), {}));
  fs::remove_all(state_dir);

  // table: a RoutingTable alone; a table then updates of one stream (full, delta, chunked).
  const std::string t1 = Serialized(first->ToProto());
  const std::string t2 = Serialized(second->ToProto());
  Write(out / "table" / "table.pb", t1);
  v1::TableUpdate full;
  full.set_nonce("n1");
  *full.mutable_full() = second->ToProto();
  full.set_chunk_count(1);
  v1::TableUpdate delta;
  delta.set_nonce("n2");
  *delta.mutable_delta() = table::ComputeDelta(*first, *second);
  delta.set_chunk_count(1);
  Write(out / "table" / "table-then-delta", t1 + kSeparator + Serialized(delta));
  Write(out / "table" / "table-then-full", t1 + kSeparator + Serialized(full));
  std::string chunked = t2;
  for (const v1::TableUpdate& chunk : table::Chunk(full, 64)) {
    chunked += kSeparator + Serialized(chunk);
  }
  Write(out / "table" / "chunked-full", chunked);
  return 0;
}
