// AdmissionQueue and FleetRoom (tools/frontend/routing/admission.h): the saturation measure on a
// real Router, admission, the bounded queue, priority order, displacement, the deadline, the
// Retry-After, the metrics. Time is given to every call (a fake clock: plain time points).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/frontend/routing/admission.h"
#include "tools/frontend/routing/routing_core.h"

namespace cacheroute::frontend {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const dataplane::Time kT0 = dataplane::Time(seconds(1000));

// Every wake, in the order it came: (name, verdict, cause).
struct Wakes {
  struct Wake {
    std::string name;
    Verdict verdict;
    ShedCause cause;
  };
  std::vector<Wake> log;
  AdmissionQueue::Wake For(std::string name) {
    return [this, name = std::move(name)](Verdict v, ShedCause c) { log.push_back({name, v, c}); };
  }
  std::vector<std::string> Admitted() const {
    std::vector<std::string> names;
    for (const Wake& w : log)
      if (w.verdict == Verdict::kAdmit) names.push_back(w.name);
    return names;
  }
};

AdmissionOptions Options(uint32_t capacity) {
  return {.saturation_tokens = 1000,
          .queue_capacity = capacity,
          .queue_timeout = seconds(5),
          .retry_after = milliseconds(1500)};
}

TEST_CASE("FleetRoom sums each up destination's room below the threshold, ledger and shared work") {
  dataplane::ManualClock clock(kT0);
  RoutingCore core({.capacity = 4, .dispatch = dataplane::DispatchFor("cacheroute"), .seed = 3},
                   clock);
  REQUIRE(core.router().Resize(3, nullptr, clock.Now()).ok);
  CHECK(FleetRoom(core.router(), 1000) == 3000);

  // Another gateway's queued work at 0 and 1: 0 past the threshold (no room), 1 at 400.
  REQUIRE(core.router().SetRemoteWork(0, {.queued_prefill_tokens = 1500, .prefilling = 3}).ok);
  REQUIRE(core.router().SetRemoteWork(1, {.queued_prefill_tokens = 400, .prefilling = 1}).ok);
  CHECK(FleetRoom(core.router(), 1000) == 0 + 600 + 1000);

  // A request routed here adds its prompt to the ledger's queued prefill until its first token.
  RoutingInput input;
  input.key = "tenant";
  input.prompt = {.text_bytes = 0, .token_ids = 200};
  RequestLifecycle r = core.Route(input, nullptr, clock.Now());
  REQUIRE(r.ok());
  const double with_request = FleetRoom(core.router(), 1000);
  CHECK(with_request < 1600);
  r.FirstToken(true);
  CHECK(FleetRoom(core.router(), 1000) == 1600);

  // An engine whose scraped KV cache usage reaches the limit has no room either (GIE's KV
  // criterion); below it, or with the default limit 1, its queued prefill alone counts.
  REQUIRE(core.router().SetKvUsage(2, 0.8).ok);
  CHECK(FleetRoom(core.router(), 1000, 0.8) == 600);
  CHECK(FleetRoom(core.router(), 1000, 0.9) == 1600);
  CHECK(FleetRoom(core.router(), 1000) == 1600);
  REQUIRE(core.router().SetKvUsage(2, 0.0).ok);

  // A down destination has no room.
  REQUIRE(core.router().MarkDown(2).ok);
  CHECK(FleetRoom(core.router(), 1000) == 600);
  REQUIRE(core.router().MarkDown(1).ok);
  CHECK(FleetRoom(core.router(), 1000) == 0);
}

TEST_CASE("with room a request is admitted at once; without, it waits until room comes") {
  AdmissionQueue queue(Options(4));
  Wakes wakes;
  CHECK(queue.Offer(0, 100, 50, kT0, wakes.For("a")).verdict == Verdict::kAdmit);
  const AdmissionResult b = queue.Offer(0, 100, 0, kT0, wakes.For("b"));
  CHECK(b.verdict == Verdict::kQueued);
  CHECK(queue.queued() == 1);
  CHECK(wakes.log.empty());
  // Still no room: nothing moves.
  CHECK(queue.Pump(0, kT0 + seconds(1)) == 0);
  CHECK(wakes.log.empty());
  // Room frees: b is admitted, by its wake.
  CHECK(queue.Pump(10, kT0 + seconds(2)) == 1);
  REQUIRE(wakes.log.size() == 1);
  CHECK(wakes.log[0].name == "b");
  CHECK(wakes.log[0].verdict == Verdict::kAdmit);
  CHECK(queue.queued() == 0);
  CHECK(queue.Counts()[0].admitted == 2);
  CHECK(queue.Counts()[0].queued == 1);
}

TEST_CASE("waiters leave highest priority first, FIFO within one, each using its tokens of room") {
  AdmissionQueue queue(Options(8));
  Wakes wakes;
  for (auto [name, priority] : std::vector<std::pair<std::string, int>>{
           {"low1", 0}, {"high1", 5}, {"low2", 0}, {"high2", 5}, {"mid", 2}}) {
    REQUIRE(queue.Offer(priority, 100, 0, kT0, wakes.For(name)).verdict == Verdict::kQueued);
  }
  // 250 tokens of room: three waiters of 100 (the third takes the room below zero).
  CHECK(queue.Pump(250, kT0 + milliseconds(1)) == 3);
  CHECK(wakes.Admitted() == std::vector<std::string>{"high1", "high2", "mid"});
  CHECK(queue.Pump(1e9, kT0 + milliseconds(2)) == 2);
  CHECK(wakes.Admitted() == std::vector<std::string>{"high1", "high2", "mid", "low1", "low2"});
}

TEST_CASE("a new arrival does not pass a waiter of its priority or higher, though room came") {
  AdmissionQueue queue(Options(8));
  Wakes wakes;
  REQUIRE(queue.Offer(3, 100, 0, kT0, wakes.For("waiting")).verdict == Verdict::kQueued);
  // Room for one: the offer pumps first, so the waiter goes and the newcomer waits.
  const AdmissionResult r = queue.Offer(3, 100, 100, kT0 + seconds(1), wakes.For("new"));
  CHECK(r.verdict == Verdict::kQueued);
  CHECK(wakes.Admitted() == std::vector<std::string>{"waiting"});
}

TEST_CASE("a sheddable request (priority < 0) is shed at once when the fleet is saturated") {
  AdmissionQueue queue(Options(8));
  Wakes wakes;
  const AdmissionResult r = queue.Offer(-1, 100, 0, kT0, wakes.For("batch"));
  CHECK(r.verdict == Verdict::kShed);
  CHECK(r.cause == ShedCause::kSheddable);
  CHECK(queue.queued() == 0);
  // With room it is admitted like any other.
  CHECK(queue.Offer(-1, 100, 10, kT0, wakes.For("batch2")).verdict == Verdict::kAdmit);
  CHECK(queue.Counts()[-1].shed[static_cast<int>(ShedCause::kSheddable)] == 1);
  CHECK(wakes.log.empty());
}

TEST_CASE("a full queue sheds a newcomer, unless it displaces the newest waiter of lower priority") {
  AdmissionQueue queue(Options(3));
  Wakes wakes;
  REQUIRE(queue.Offer(0, 1, 0, kT0, wakes.For("p0-old")).verdict == Verdict::kQueued);
  REQUIRE(queue.Offer(0, 1, 0, kT0, wakes.For("p0-new")).verdict == Verdict::kQueued);
  REQUIRE(queue.Offer(1, 1, 0, kT0, wakes.For("p1")).verdict == Verdict::kQueued);

  // Same priority as the lowest waiter: no one to displace.
  AdmissionResult r = queue.Offer(0, 1, 0, kT0, wakes.For("p0-late"));
  CHECK(r.verdict == Verdict::kShed);
  CHECK(r.cause == ShedCause::kQueueFull);
  CHECK(wakes.log.empty());

  // Higher priority: the newest of the lowest band is shed in its place.
  r = queue.Offer(2, 1, 0, kT0, wakes.For("p2"));
  CHECK(r.verdict == Verdict::kQueued);
  REQUIRE(wakes.log.size() == 1);
  CHECK(wakes.log[0].name == "p0-new");
  CHECK(wakes.log[0].verdict == Verdict::kShed);
  CHECK(wakes.log[0].cause == ShedCause::kDisplaced);
  CHECK(queue.queued() == 3);
  CHECK(queue.Pump(1e9, kT0) == 3);
  CHECK(wakes.Admitted() == std::vector<std::string>{"p2", "p1", "p0-old"});
}

TEST_CASE("with no queue a request the fleet has no room for is shed at once") {
  AdmissionQueue queue(Options(0));
  Wakes wakes;
  const AdmissionResult r = queue.Offer(7, 1, 0, kT0, wakes.For("x"));
  CHECK(r.verdict == Verdict::kShed);
  CHECK(r.cause == ShedCause::kQueueFull);
}

TEST_CASE("a waiter not admitted within queue_timeout is shed at its deadline, not before") {
  AdmissionQueue queue(Options(4));
  Wakes wakes;
  REQUIRE(queue.Offer(0, 1, 0, kT0, wakes.For("first")).verdict == Verdict::kQueued);
  REQUIRE(queue.Offer(0, 1, 0, kT0 + seconds(2), wakes.For("second")).verdict ==
          Verdict::kQueued);
  CHECK(queue.NextDeadline() == kT0 + seconds(5));
  CHECK(queue.Pump(0, kT0 + seconds(5) - milliseconds(1)) == 0);
  CHECK(wakes.log.empty());
  CHECK(queue.Pump(0, kT0 + seconds(5)) == 0);
  REQUIRE(wakes.log.size() == 1);
  CHECK(wakes.log[0].name == "first");
  CHECK(wakes.log[0].cause == ShedCause::kQueueTimeout);
  CHECK(queue.NextDeadline() == kT0 + seconds(7));
  // Room at the second's deadline: the deadline wins (it waited its whole timeout).
  CHECK(queue.Pump(1e9, kT0 + seconds(7)) == 0);
  CHECK(wakes.log.back().name == "second");
  CHECK(wakes.log.back().cause == ShedCause::kQueueTimeout);
  CHECK_FALSE(queue.NextDeadline().has_value());
}

TEST_CASE("a withdrawn waiter leaves without a wake, shed as client_gone; Withdraw of a woken "
          "one is false") {
  AdmissionQueue queue(Options(4));
  Wakes wakes;
  const AdmissionResult a = queue.Offer(0, 1, 0, kT0, wakes.For("a"));
  const AdmissionResult b = queue.Offer(0, 1, 0, kT0, wakes.For("b"));
  CHECK(queue.Withdraw(a.ticket, kT0 + seconds(1)));
  CHECK_FALSE(queue.Withdraw(a.ticket, kT0 + seconds(1)));
  CHECK(queue.queued() == 1);
  CHECK(queue.Counts()[0].shed[static_cast<int>(ShedCause::kClientGone)] == 1);
  CHECK(queue.Pump(1, kT0) == 1);
  CHECK(wakes.Admitted() == std::vector<std::string>{"b"});
  CHECK(wakes.log.size() == 1);  // a was never woken
  CHECK_FALSE(queue.Withdraw(b.ticket, kT0 + seconds(1)));
  CHECK(queue.Counts()[0].shed[static_cast<int>(ShedCause::kClientGone)] == 1);
  base::Exposition page;
  queue.Render(page);
  CHECK_THAT(page.Take(),
             Catch::Contains(R"(admission_shed_total{priority="0",reason="client_gone"} 1)"));
}

TEST_CASE("Retry-After is retry_after rounded up to whole seconds, at least one") {
  CHECK(AdmissionQueue(Options(1)).retry_after_seconds() == 2);
  AdmissionOptions o = Options(1);
  o.retry_after = milliseconds(10);
  CHECK(AdmissionQueue(o).retry_after_seconds() == 1);
  o.retry_after = seconds(30);
  CHECK(AdmissionQueue(o).retry_after_seconds() == 30);
}

TEST_CASE("the metrics count admitted, queued and shed by priority and the queue's length") {
  AdmissionQueue queue(Options(1));
  Wakes wakes;
  queue.Offer(0, 1, 5, kT0, wakes.For("a"));
  queue.Offer(0, 1, 0, kT0, wakes.For("b"));
  queue.Offer(0, 1, 0, kT0, wakes.For("c"));  // full: shed
  queue.Offer(-2, 1, 0, kT0, wakes.For("d"));
  base::Exposition page("g_");
  queue.Render(page);
  const std::string text = page.Take();
  CHECK(absl::StrContains(text, "g_admission_admitted_total{priority=\"0\"} 1\n"));
  CHECK(absl::StrContains(text, "g_admission_queued_total{priority=\"0\"} 1\n"));
  CHECK(absl::StrContains(text,
                          "g_admission_shed_total{priority=\"0\",reason=\"queue_full\"} 1\n"));
  CHECK(absl::StrContains(text,
                          "g_admission_shed_total{priority=\"-2\",reason=\"sheddable\"} 1\n"));
  CHECK(absl::StrContains(text, "g_admission_queue_length 1\n"));
  CHECK(absl::StrContains(text, "# TYPE g_admission_queue_seconds histogram\n"));
}

}  // namespace
}  // namespace cacheroute::frontend
