// See watchdog.h.
#include "tools/http/watchdog.h"

namespace cacheroute::http {
namespace {
thread_local Watchdog* current = nullptr;
}  // namespace

Watchdog::Watchdog(boost::asio::io_context& context, std::chrono::milliseconds tick)
    : timer_(std::in_place, context), tick_(tick) {}

Watchdog* Watchdog::Current() { return current; }
void Watchdog::SetCurrent(Watchdog* watchdog) { current = watchdog; }

void Watchdog::Shutdown() {
  timer_.reset();
  ticking_ = false;
}

void Watchdog::Add(Watch* w) {
  w->index_ = watches_.size();
  watches_.push_back(w);
  if (!ticking_ && timer_) Schedule();
}

void Watchdog::Remove(Watch* w) {
  const size_t i = w->index_;
  Watch* last = watches_.back();
  watches_[i] = last;
  last->index_ = i;
  watches_.pop_back();
  w->index_ = Watch::kNone;
}

void Watchdog::Schedule() {
  ticking_ = true;
  timer_->expires_after(tick_);
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the watchdog is shutting down
    Tick();
  });
}

void Watchdog::Tick() {
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = watches_.size(); i-- > 0;) {
    if (i >= watches_.size()) continue;  // removed by an earlier cancellation's swap
    Watch* w = watches_[i];
    if (w->deadline_ > now) continue;
    Remove(w);
    w->fired_ = true;
    boost::system::error_code ignored;
    w->socket_->cancel(ignored);  // completions are posted, never run inline
  }
  ticking_ = false;
  if (!watches_.empty() && timer_) Schedule();
}

void Watch::Arm(std::chrono::steady_clock::duration timeout) {
  fired_ = false;
  if (watchdog_ == nullptr) return;
  deadline_ = std::chrono::steady_clock::now() + timeout;
  if (index_ == kNone) watchdog_->Add(this);
}

void Watch::Disarm() {
  if (watchdog_ != nullptr && index_ != kNone) watchdog_->Remove(this);
}

}  // namespace cacheroute::http
