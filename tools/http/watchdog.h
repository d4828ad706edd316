// http::Watchdog: coarse timeouts for socket operations, one per I/O thread. An Asio timer per
// operation costs a timer-queue insertion and a timerfd update on every read and write (about 30
// µs a proxied request, measured with cacheroute-gateway-bench); a Watch instead stores a
// deadline, and one timer per thread ticks every `tick` while anything is watched, cancelling the
// socket of every watch past its deadline. Timeouts are therefore late by up to one tick.
//
// Not thread-safe: a Watchdog and its Watches are used only on their I/O thread. http::Server
// makes one per thread and sets Current() there; elsewhere Current() is null and a Watch on a
// null Watchdog never fires.
//
// Usage (in a coroutine on an I/O thread):
//   http::Watch watch(http::Watchdog::Current(), socket);
//   watch.Arm(std::chrono::seconds(2));
//   auto [ec] = co_await socket.async_connect(endpoint, as_tuple(use_awaitable));
//   watch.Disarm();
//   if (watch.fired()) … timed out (ec is operation_aborted) …
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

namespace cacheroute::http {

class Watch;

class Watchdog {
 public:
  explicit Watchdog(boost::asio::io_context& context,
                    std::chrono::milliseconds tick = std::chrono::milliseconds(10));
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The calling thread's Watchdog (set by the thread that runs its context), or null.
  static Watchdog* Current();
  static void SetCurrent(Watchdog* watchdog);

  size_t watched() const { return watches_.size(); }
  // Drops the timer (before its context goes); Watches still unregister safely afterwards.
  void Shutdown();

 private:
  friend class Watch;
  void Add(Watch* w);
  void Remove(Watch* w);
  void Schedule();
  void Tick();

  std::optional<boost::asio::steady_timer> timer_;
  const std::chrono::milliseconds tick_;
  bool ticking_ = false;
  std::vector<Watch*> watches_;  // each knows its index
};

class Watch {
 public:
  Watch(Watchdog* watchdog, boost::asio::ip::tcp::socket& socket)
      : watchdog_(watchdog), socket_(&socket) {}
  ~Watch() { Disarm(); }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Cancels the socket's operations once `timeout` has passed (unless disarmed or re-armed).
  void Arm(std::chrono::steady_clock::duration timeout);
  void Disarm();
  // True once the deadline cancelled the socket; Arm clears it.
  bool fired() const { return fired_; }

 private:
  friend class Watchdog;
  Watchdog* watchdog_;
  boost::asio::ip::tcp::socket* socket_;
  std::chrono::steady_clock::time_point deadline_{};
  size_t index_ = kNone;
  bool fired_ = false;
  static constexpr size_t kNone = static_cast<size_t>(-1);
};

}  // namespace cacheroute::http
