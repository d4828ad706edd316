// http::Watchdog (tools/http/watchdog.h): a watch past its deadline cancels its socket's pending
// operation and says so; a disarmed or re-armed one does not fire early. Real loopback sockets;
// the deadlines are short and nothing asserts on elapsed time.
#include "tools/http/watchdog.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>

namespace cacheroute::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A connected pair of loopback sockets on `context`.
std::pair<tcp::socket, tcp::socket> Pair(asio::io_context& context) {
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket a(context), b(context);
  a.connect(acceptor.local_endpoint());
  acceptor.accept(b);
  return {std::move(a), std::move(b)};
}

TEST_CASE("a watch past its deadline cancels the read it guards; a disarmed one never fires") {
  asio::io_context context(1);
  Watchdog dog(context, std::chrono::milliseconds(1));
  // References, not structured bindings: clang 14 cannot capture a binding in the lambda below.
  auto quiet_pair = Pair(context);
  auto busy_pair = Pair(context);
  tcp::socket& quiet = quiet_pair.first;
  tcp::socket& busy = busy_pair.first;
  tcp::socket& busy_peer = busy_pair.second;
  bool timed_out = false, aborted = false, disarmed_fired = true;
  size_t watched_while_reading = 0;
  asio::co_spawn(
      context,
      [&]() -> asio::awaitable<void> {
        char byte;
        Watch watch(&dog, quiet);
        watch.Arm(std::chrono::milliseconds(20));
        watched_while_reading = dog.watched();
        auto [ec, n] = co_await quiet.async_read_some(asio::buffer(&byte, 1),
                                                      asio::as_tuple(asio::use_awaitable));
        aborted = ec == asio::error::operation_aborted;
        timed_out = watch.fired();
        // A read that completes in time, then is disarmed: nothing fires later.
        Watch other(&dog, busy);
        other.Arm(std::chrono::seconds(30));
        co_await asio::async_write(busy_peer, asio::buffer("x", 1),
                                   asio::as_tuple(asio::use_awaitable));
        auto [ec2, n2] = co_await busy.async_read_some(asio::buffer(&byte, 1),
                                                       asio::as_tuple(asio::use_awaitable));
        other.Disarm();
        disarmed_fired = other.fired() || ec2.failed();
      },
      asio::detached);
  context.run();
  CHECK(watched_while_reading == 1);
  CHECK(aborted);
  CHECK(timed_out);
  CHECK_FALSE(disarmed_fired);
  CHECK(dog.watched() == 0);
}

TEST_CASE("watches come and go in any order; Current() is null off an I/O thread") {
  asio::io_context context(1);
  Watchdog dog(context);
  auto [a, b] = Pair(context);
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 10; ++i) {
    watches.push_back(std::make_unique<Watch>(&dog, i % 2 ? a : b));
    watches.back()->Arm(std::chrono::seconds(60));
  }
  CHECK(dog.watched() == 10);
  for (int i : {3, 0, 9, 5}) watches[i].reset();
  CHECK(dog.watched() == 6);
  watches[1]->Arm(std::chrono::seconds(1));  // re-arming keeps one entry
  CHECK(dog.watched() == 6);
  watches.clear();
  CHECK(dog.watched() == 0);
  CHECK(Watchdog::Current() == nullptr);
  Watch unowned(nullptr, a);
  unowned.Arm(std::chrono::milliseconds(0));  // no watchdog: never fires
  CHECK_FALSE(unowned.fired());
  dog.Shutdown();
}

}  // namespace
}  // namespace cacheroute::http
