// See admission.h.
#include "tools/frontend/routing/admission.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

const char* ShedCauseName(ShedCause cause) {
  switch (cause) {
    case ShedCause::kNone:
      return "none";
    case ShedCause::kSheddable:
      return "sheddable";
    case ShedCause::kQueueFull:
      return "queue_full";
    case ShedCause::kDisplaced:
      return "displaced";
    case ShedCause::kQueueTimeout:
      return "queue_timeout";
    case ShedCause::kClientGone:
      return "client_gone";
  }
  return "none";
}

std::string ShedMessage(ShedCause cause, int retry_after_seconds) {
  const char* why = "the fleet is saturated and the queue is full";
  switch (cause) {
    case ShedCause::kSheddable:
      why = "the fleet is saturated and the request is sheddable";
      break;
    case ShedCause::kQueueTimeout:
      why = "the fleet stayed saturated for the request's whole wait in the queue";
      break;
    case ShedCause::kDisplaced:
      why = "a request of higher priority took its place in the full queue";
      break;
    case ShedCause::kClientGone:
      why = "the client went away while the request waited in the queue";
      break;
    case ShedCause::kNone:
    case ShedCause::kQueueFull:
      break;
  }
  return absl::StrCat("request shed (", ShedCauseName(cause), "): ", why, "; retry after ",
                      retry_after_seconds, " s");
}

std::string ShedErrorBody(ShedCause cause, int retry_after_seconds) {
  return ErrorBody(ShedMessage(cause, retry_after_seconds), kShedErrorType, kShedErrorCode);
}

double FleetRoom(const dataplane::Router& router, double saturation_tokens,
                 double saturation_kv_usage) {
  const uint32_t n = std::min(router.destination_count(), router.capacity());
  double room = 0;
  for (uint32_t d = 0; d < n; ++d) {
    if (!router.loads().Up(d)) continue;
    if (router.loads().Scraped(d).kv_usage >= saturation_kv_usage) continue;
    const double queued = router.LedgerWork(d).queued_prefill_tokens +
                          router.RemoteWork(d).queued_prefill_tokens;
    room += std::max(0.0, saturation_tokens - queued);
  }
  return room;
}

uint64_t AdmissionQueue::PriorityCounts::shed_total() const {
  uint64_t total = 0;
  for (uint64_t s : shed) total += s;
  return total;
}

AdmissionQueue::AdmissionQueue(const AdmissionOptions& options) : options_(options) {}

int AdmissionQueue::retry_after_seconds() const {
  const double s = std::chrono::duration<double>(options_.retry_after).count();
  return std::max(1, static_cast<int>(std::ceil(s)));
}

void AdmissionQueue::Call(std::deque<Woken>& woken) {
  for (Woken& w : woken) w.wake(w.verdict, w.cause);
}

void AdmissionQueue::LeaveLocked(int priority, Waiter& w, Verdict verdict, ShedCause cause,
                                 dataplane::Time now, std::deque<Woken>& woken) {
  PriorityCounts& c = counts_[priority];
  if (verdict == Verdict::kAdmit) {
    ++c.admitted;
  } else {
    ++c.shed[static_cast<int>(cause)];
  }
  waited_.Observe(std::max(dataplane::Duration::zero(), now - w.since));
  --size_;
  woken.push_back({std::move(w.wake), verdict, cause});
}

void AdmissionQueue::PumpLocked(double& room, dataplane::Time now, std::deque<Woken>& woken) {
  for (auto it = bands_.begin(); it != bands_.end();) {
    std::deque<Waiter>& band = it->second;
    // Every waiter of a band waited queue_timeout from its arrival: the oldest expire first.
    while (!band.empty() && band.front().deadline <= now) {
      LeaveLocked(it->first, band.front(), Verdict::kShed, ShedCause::kQueueTimeout, now, woken);
      band.pop_front();
    }
    it = band.empty() ? bands_.erase(it) : std::next(it);
  }
  while (room > 0 && !bands_.empty()) {
    auto it = bands_.begin();
    Waiter& w = it->second.front();
    room -= w.tokens;
    LeaveLocked(it->first, w, Verdict::kAdmit, ShedCause::kNone, now, woken);
    it->second.pop_front();
    if (it->second.empty()) bands_.erase(it);
  }
}

AdmissionResult AdmissionQueue::Offer(int priority, double tokens, double room,
                                      dataplane::Time now, Wake wake) {
  std::deque<Woken> woken;
  AdmissionResult result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked(room, now, woken);
    PriorityCounts& c = counts_[priority];
    // Waiters of this priority or higher go first (bands_ is ordered highest first).
    const bool ahead = !bands_.empty() && bands_.begin()->first >= priority;
    if (room > 0 && !ahead) {
      ++c.admitted;
      result = {Verdict::kAdmit, ShedCause::kNone, 0};
    } else if (priority < 0 && room <= 0) {
      ++c.shed[static_cast<int>(ShedCause::kSheddable)];
      result = {Verdict::kShed, ShedCause::kSheddable, 0};
    } else {
      bool fits = size_ < options_.queue_capacity;
      if (!fits && !bands_.empty()) {
        // Displace the newest waiter of the lowest priority, if that is below this request's.
        auto lowest = std::prev(bands_.end());
        if (lowest->first < priority) {
          LeaveLocked(lowest->first, lowest->second.back(), Verdict::kShed, ShedCause::kDisplaced,
                      now, woken);
          lowest->second.pop_back();
          if (lowest->second.empty()) bands_.erase(lowest);
          fits = true;
        }
      }
      if (fits) {
        const uint64_t ticket = next_ticket_++;
        bands_[priority].push_back({.ticket = ticket,
                                    .tokens = std::max(1.0, tokens),
                                    .since = now,
                                    .deadline = now + options_.queue_timeout,
                                    .wake = std::move(wake)});
        ++size_;
        ++c.queued;
        result = {Verdict::kQueued, ShedCause::kNone, ticket};
      } else {
        ++c.shed[static_cast<int>(ShedCause::kQueueFull)];
        result = {Verdict::kShed, ShedCause::kQueueFull, 0};
      }
    }
  }
  Call(woken);
  return result;
}

size_t AdmissionQueue::Pump(double room, dataplane::Time now) {
  std::deque<Woken> woken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked(room, now, woken);
  }
  Call(woken);
  return static_cast<size_t>(std::count_if(woken.begin(), woken.end(), [](const Woken& w) {
    return w.verdict == Verdict::kAdmit;
  }));
}

bool AdmissionQueue::Withdraw(uint64_t ticket, dataplane::Time now, ShedCause cause) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = bands_.begin(); it != bands_.end(); ++it) {
    std::deque<Waiter>& band = it->second;
    const auto w = std::find_if(band.begin(), band.end(),
                                [ticket](const Waiter& x) { return x.ticket == ticket; });
    if (w == band.end()) continue;
    ++counts_[it->first].shed[static_cast<int>(cause)];
    waited_.Observe(std::max(dataplane::Duration::zero(), now - w->since));
    band.erase(w);
    --size_;
    if (band.empty()) bands_.erase(it);
    return true;
  }
  return false;
}

std::optional<dataplane::Time> AdmissionQueue::NextDeadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<dataplane::Time> next;
  for (const auto& [priority, band] : bands_) {
    if (!next.has_value() || band.front().deadline < *next) next = band.front().deadline;
  }
  return next;
}

size_t AdmissionQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

std::map<int, AdmissionQueue::PriorityCounts> AdmissionQueue::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void AdmissionQueue::Render(base::Exposition& page) const {
  const std::map<int, PriorityCounts> counts = Counts();
  const auto label = [](int priority) {
    return base::Exposition::Label("priority", absl::StrCat(priority));
  };
  page.Family("admission_admitted_total", "counter",
              "Requests sent on by the admission queue (at once or after waiting), by priority.");
  for (const auto& [priority, c] : counts) {
    page.Sample("admission_admitted_total", static_cast<double>(c.admitted), label(priority));
  }
  page.Family("admission_queued_total", "counter",
              "Requests that waited for room in the admission queue, by priority.");
  for (const auto& [priority, c] : counts) {
    page.Sample("admission_queued_total", static_cast<double>(c.queued), label(priority));
  }
  page.Family("admission_shed_total", "counter",
              "Requests answered 429 by the admission queue, by priority and reason.");
  for (const auto& [priority, c] : counts) {
    for (int cause = 1; cause < kShedCauses; ++cause) {
      page.Sample("admission_shed_total", static_cast<double>(c.shed[cause]),
                  absl::StrCat(label(priority), ",",
                               base::Exposition::Label(
                                   "reason", ShedCauseName(static_cast<ShedCause>(cause)))));
    }
  }
  page.Gauge("admission_queue_length", "Requests waiting in the admission queue now.",
             static_cast<double>(queued()));
  page.Family("admission_queue_seconds", "histogram",
              "Time requests waited in the admission queue, admitted or shed.");
  waited_.Render(page, "admission_queue_seconds", "");
}

}  // namespace cacheroute::frontend
