// Tests for dataplane/arm_evidence.h: the arm split (share against the fraction, stability,
// monotonicity, extremes, independence from the key id's own bits, pinned positions), the TTFT
// histogram (bucket edges, quantiles and tail counts on known data, FromCounts) and exact merges.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cacheroute/dataplane/arm_evidence.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::dataplane {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kKeys = 100000;

// Two kinds of key ids: consecutive integers (as structured as ids get) and real KeyIds.
std::vector<uint64_t> SequentialIds() {
  std::vector<uint64_t> ids(kKeys);
  for (size_t i = 0; i < kKeys; ++i) ids[i] = i;
  return ids;
}

std::vector<uint64_t> StringIds() {
  std::vector<uint64_t> ids(kKeys);
  for (size_t i = 0; i < kKeys; ++i)
    ids[i] = KeyId("tenant-" + std::to_string(i % 97) + "/p" + std::to_string(i));
  return ids;
}

double TableShare(const std::vector<uint64_t>& ids, double fraction) {
  size_t table = 0;
  for (uint64_t id : ids) table += ArmOf(id, fraction) == Arm::kTable;
  return static_cast<double>(table) / static_cast<double>(ids.size());
}

TEST_CASE("ArmOf puts the fraction of keys on the table arm") {
  for (const auto& ids : {SequentialIds(), StringIds()}) {
    for (double f : {0.05, 0.2, 0.5}) {
      const double share = TableShare(ids, f);
      INFO("fraction " << f << ", share " << share);
      CHECK(std::abs(share - f) <= 0.01);
      // Tighter: within 5 standard deviations of a binomial share.
      CHECK(std::abs(share - f) <= 5 * std::sqrt(f * (1 - f) / kKeys));
    }
  }
}

TEST_CASE("ArmOf is stable and monotone as the fraction grows") {
  const std::vector<uint64_t> ids = StringIds();
  const std::vector<double> fractions = {0.0, 0.001, 0.01, 0.05, 0.2, 0.2000001, 0.5, 0.95, 1.0};
  size_t unstable = 0, demoted = 0, off_rule = 0;
  for (uint64_t id : ids) {
    bool was_table = false;
    for (double f : fractions) {
      const Arm arm = ArmOf(id, f);
      unstable += arm != ArmOf(id, f);                            // the same answer every time
      demoted += was_table && arm != Arm::kTable;                 // a table key stays on the table
      off_rule += (arm == Arm::kTable) != (ArmPosition(id) < f);  // exactly position < fraction
      was_table = arm == Arm::kTable;
    }
  }
  CHECK(unstable == 0);
  CHECK(demoted == 0);
  CHECK(off_rule == 0);
}

TEST_CASE("ArmOf extremes: 0 always control, 1 always table, out-of-range fractions clamped") {
  std::vector<uint64_t> ids = SequentialIds();
  ids.push_back(std::numeric_limits<uint64_t>::max());
  ids.push_back(kArmSalt);  // the id whose mix input is 0
  size_t not_control = 0, not_table = 0, out_of_range = 0;
  for (uint64_t id : ids) {
    for (double f : {0.0, -0.0, -1.0, -kInf, kNaN}) not_control += ArmOf(id, f) != Arm::kControl;
    for (double f : {1.0, 1.5, kInf}) not_table += ArmOf(id, f) != Arm::kTable;
    const double u = ArmPosition(id);
    out_of_range += !(u >= 0.0 && u < 1.0);
  }
  CHECK(not_control == 0);
  CHECK(not_table == 0);
  CHECK(out_of_range == 0);
}

TEST_CASE("ArmOf is unrelated to the key id's own bits") {
  // The table hashes key ids and the policies hash Mix64(key_id ^ salt): the arm must not pick
  // out any class of those. Check the share within classes of the raw id and of Mix64(id).
  const std::vector<uint64_t> ids = StringIds();
  for (int bit : {0, 1, 31, 63}) {
    for (bool mixed : {false, true}) {
      size_t in_class = 0;
      size_t table = 0;
      for (uint64_t id : ids) {
        const uint64_t h = mixed ? Mix64(id) : id;
        if ((h >> bit & 1) == 0) continue;
        ++in_class;
        table += ArmOf(id, 0.5) == Arm::kTable;
      }
      const double share = static_cast<double>(table) / static_cast<double>(in_class);
      INFO("bit " << bit << (mixed ? " of Mix64(id)" : " of id") << ": share " << share);
      CHECK(std::abs(share - 0.5) <= 5 * std::sqrt(0.25 / static_cast<double>(in_class)));
    }
  }
}

TEST_CASE("ArmOf positions are pinned: every gateway version must split the same way") {
  // Values computed once from the definition (hex floats, so exact); a change here changes the
  // split of every deployed gateway.
  CHECK(ArmPosition(0) == 0x1.155abb2ba3895p-1);                  // 0.5417...
  CHECK(ArmPosition(KeyId("tenant-7")) == 0x1.a06c74964e228p-4);  // 0.1016...
  CHECK(ArmOf(0, 0.5) == Arm::kControl);
  CHECK(ArmOf(0, 0.55) == Arm::kTable);
  CHECK(ArmOf(KeyId("tenant-7"), 0.1) == Arm::kControl);
  CHECK(ArmOf(KeyId("tenant-7"), 0.2) == Arm::kTable);
}

TEST_CASE("TtftHistogram bounds: increasing, overflow last, one count per bound") {
  const auto& bounds = TtftHistogram::bounds();
  REQUIRE(bounds.size() == TtftHistogram::kBuckets);
  REQUIRE(TtftHistogram{}.counts().size() == bounds.size());
  for (size_t i = 1; i < bounds.size(); ++i) CHECK(bounds[i - 1] < bounds[i]);
  CHECK(bounds.front() == 0.01);
  CHECK(bounds[bounds.size() - 2] == 60.0);
  CHECK(bounds.back() == kInf);
}

TEST_CASE("TtftHistogram bucket edges: a value equal to a bound goes in that bound's bucket") {
  const auto& bounds = TtftHistogram::bounds();
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    INFO("bound " << bounds[i]);
    CHECK(TtftHistogram::BucketOf(bounds[i]) == i);
    CHECK(TtftHistogram::BucketOf(std::nextafter(bounds[i], kInf)) == i + 1);
    if (i > 0) CHECK(TtftHistogram::BucketOf(std::nextafter(bounds[i], 0.0)) == i);
  }
  CHECK(TtftHistogram::BucketOf(0.0) == 0);
  CHECK(TtftHistogram::BucketOf(-0.0) == 0);
  CHECK(TtftHistogram::BucketOf(-5.0) == 0);
  CHECK(TtftHistogram::BucketOf(-kInf) == 0);
  CHECK(TtftHistogram::BucketOf(kNaN) == 0);
  CHECK(TtftHistogram::BucketOf(0.012) == 1);
  CHECK(TtftHistogram::BucketOf(0.6) == 9);
  CHECK(TtftHistogram::BucketOf(60.0) == TtftHistogram::kBuckets - 2);
  CHECK(TtftHistogram::BucketOf(61.0) == TtftHistogram::kBuckets - 1);
  CHECK(TtftHistogram::BucketOf(std::numeric_limits<double>::max()) == TtftHistogram::kBuckets - 1);
  CHECK(TtftHistogram::BucketOf(kInf) == TtftHistogram::kBuckets - 1);

  TtftHistogram h;
  h.Observe(kNaN);
  h.Observe(-1);
  h.Observe(0.5);
  h.Observe(kInf);
  CHECK(h.count() == 4);
  CHECK(h.counts()[0] == 2);
  CHECK(h.counts()[8] == 1);
  CHECK(h.counts()[TtftHistogram::kBuckets - 1] == 1);
}

TEST_CASE("TtftHistogram quantiles and tail counts on known data") {
  TtftHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.Quantile(0.5) == 0.0);  // empty
  CHECK(h.Quantile(0.99) == 0.0);
  CHECK(h.CountAbove(0) == 0);

  // 90 samples in (0.025, 0.05], 9 in (0.3, 0.5], 1 in the overflow bucket.
  for (int i = 0; i < 90; ++i) h.Observe(0.04);
  for (int i = 0; i < 9; ++i) h.Observe(0.4);
  h.Observe(100);
  REQUIRE(h.count() == 100);
  CHECK(h.Quantile(0.0) == 0.05);  // rank 1
  CHECK(h.Quantile(0.5) == 0.05);
  CHECK(h.Quantile(0.9) == 0.05);    // rank 90, the last sample of the first bucket
  CHECK(h.Quantile(0.905) == 0.5);   // rank 91
  CHECK(h.Quantile(0.99) == 0.5);    // rank 99
  CHECK(h.Quantile(0.995) == kInf);  // rank 100: overflow
  CHECK(h.Quantile(1.0) == kInf);
  CHECK(h.Quantile(2.0) == kInf);   // clamped to 1
  CHECK(h.Quantile(-1.0) == 0.05);  // clamped to 0
  CHECK(h.Quantile(kNaN) == 0.05);
  CHECK(h.QuantileBucket(0.99) == 8);
  CHECK(h.QuantileBucket(0.5) == 2);

  CHECK(h.CountAbove(0) == 100);
  CHECK(h.CountAbove(1) == 100);
  CHECK(h.CountAbove(2) == 10);
  CHECK(h.CountAbove(7) == 10);
  CHECK(h.CountAbove(8) == 1);
  CHECK(h.CountAbove(TtftHistogram::kBuckets - 2) == 1);
  CHECK(h.CountAbove(TtftHistogram::kBuckets - 1) == 0);
  CHECK(h.CountAbove(1000) == 0);

  // One sample: every quantile is its bucket.
  TtftHistogram one;
  one.Observe(1.2);
  for (double q : {0.0, 0.01, 0.5, 0.99, 1.0}) CHECK(one.Quantile(q) == 1.5);
}

TEST_CASE("TtftHistogram merge of three equals observing every sample in one, exactly") {
  std::mt19937 random(7);
  std::lognormal_distribution<double> ttft(std::log(0.3), 1.2);
  TtftHistogram parts[3];
  TtftHistogram all;
  for (int i = 0; i < 30000; ++i) {
    const double s = i % 101 == 0 ? -1.0 : ttft(random);
    parts[i % 3].Observe(s);
    all.Observe(s);
  }
  TtftHistogram a = parts[0];  // (p0 + p1) + p2
  a.Merge(parts[1]);
  a.Merge(parts[2]);
  TtftHistogram b = parts[2];  // p2 + (p1 + p0)
  TtftHistogram p10 = parts[1];
  p10.Merge(parts[0]);
  b.Merge(p10);
  CHECK(a == all);
  CHECK(b == all);
  CHECK(a.counts() == all.counts());
  CHECK(a.count() == 30000);
  CHECK(a.Quantile(0.99) == all.Quantile(0.99));
  TtftHistogram empty;
  empty.Merge(all);
  CHECK(empty == all);
}

TEST_CASE("ArmEvidence and Evidence merge every field exactly") {
  ArmEvidence x{
      .requests = 10, .failures = 2, .prompt_tokens = 1000, .cached_tokens = 600, .ttft = {}};
  x.ttft.Observe(0.2);
  ArmEvidence y{.requests = 5, .failures = 1, .prompt_tokens = 70, .cached_tokens = 7, .ttft = {}};
  y.ttft.Observe(3.0);
  y.ttft.Observe(0.2);
  ArmEvidence xy = x;
  xy.Merge(y);
  CHECK(xy.requests == 15);
  CHECK(xy.failures == 3);
  CHECK(xy.prompt_tokens == 1070);
  CHECK(xy.cached_tokens == 607);
  CHECK(xy.ttft.count() == 3);
  CHECK(xy.ttft.counts()[TtftHistogram::BucketOf(0.2)] == 2);
  ArmEvidence yx = y;
  yx.Merge(x);
  CHECK(xy == yx);

  Evidence e1;
  e1.of(Arm::kTable) = x;
  e1.of(Arm::kControl) = y;
  CHECK(e1.table == x);
  CHECK(e1.control == y);
  Evidence e2;
  e2.table = y;
  Evidence e3;
  e3.control = x;
  Evidence left = e1;  // (e1 + e2) + e3
  left.Merge(e2);
  left.Merge(e3);
  Evidence right = e3;  // e3 + (e2 + e1)
  Evidence e21 = e2;
  e21.Merge(e1);
  right.Merge(e21);
  CHECK(left == right);
  CHECK(left.table == xy);
  CHECK(left.control == xy);
  const Evidence& c = left;
  CHECK(&c.of(Arm::kTable) == &left.table);
  CHECK(&c.of(Arm::kControl) == &left.control);
}

TEST_CASE("TtftHistogram::FromCounts rebuilds a histogram and rejects a wrong size") {
  TtftHistogram h;
  for (double s : {0.001, 0.03, 0.03, 0.7, 2.5, 90.0}) h.Observe(s);
  const std::optional<TtftHistogram> back = TtftHistogram::FromCounts(h.counts());
  REQUIRE(back.has_value());
  CHECK(*back == h);

  std::vector<uint64_t> counts(h.counts().begin(), h.counts().end());
  CHECK(TtftHistogram::FromCounts(counts) == h);  // from a vector too
  counts.pop_back();
  CHECK_FALSE(TtftHistogram::FromCounts(counts).has_value());  // 21
  counts.push_back(0);
  counts.push_back(0);
  CHECK_FALSE(TtftHistogram::FromCounts(counts).has_value());  // 23
  CHECK_FALSE(TtftHistogram::FromCounts({}).has_value());

  // Counts whose sum would not fit 64 bits are rejected too.
  std::vector<uint64_t> huge(TtftHistogram::kBuckets, 0);
  huge[0] = std::numeric_limits<uint64_t>::max();
  CHECK(TtftHistogram::FromCounts(huge).has_value());
  huge[5] = 1;
  CHECK_FALSE(TtftHistogram::FromCounts(huge).has_value());
}

}  // namespace
}  // namespace cacheroute::dataplane
