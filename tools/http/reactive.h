// Reactive HTTP I/O on a plain TCP socket: try the operation at once, non-blocking, and go through
// Asio (a wait, or an asynchronous read) only when the socket would block. An Asio operation that completes at
// once has its completion posted, and the scheduler polls the reactor (a zero-timeout epoll_wait)
// before running it; a proxied request has several such operations, each a system call on its
// own. These helpers need the socket in non-blocking mode (socket.non_blocking(true)); a
// Watchdog cancelling the socket ends a wait with operation_aborted, as it ends any operation.
//
// Usage (in a coroutine; `socket` is the stream's tcp::socket):
//   socket.non_blocking(true);
//   beast::error_code ec = co_await http::ReactiveWrite(socket, request);
//   ec = co_await http::ReactiveReadHeader(socket, buffer, parser);
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace cacheroute::http {

inline bool WouldBlock(const boost::beast::error_code& ec) {
  return ec == boost::asio::error::would_block || ec == boost::asio::error::try_again;
}

// Waits until `socket` is ready for `what`; the error of the wait, if any.
inline boost::asio::awaitable<boost::beast::error_code> WaitReady(
    boost::asio::ip::tcp::socket& socket, boost::asio::ip::tcp::socket::wait_type what) {
  auto [ec] = co_await socket.async_wait(what, boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return ec;
}

// Writes a whole message.
template <bool isRequest, class Body, class Fields>
boost::asio::awaitable<boost::beast::error_code> ReactiveWrite(
    boost::asio::ip::tcp::socket& socket, boost::beast::http::message<isRequest, Body, Fields>& m) {
  boost::beast::http::serializer<isRequest, Body, Fields> serializer{m};
  while (!serializer.is_done()) {
    boost::beast::error_code ec;
    boost::beast::http::write_some(socket, serializer, ec);
    if (WouldBlock(ec)) {
      if (boost::beast::error_code w = co_await WaitReady(socket, socket.wait_write)) co_return w;
      continue;
    }
    if (ec) co_return ec;
  }
  co_return boost::beast::error_code{};
}

// Which Beast read: read_header (until the parser has the message's header) or read_some (some
// of the message: at least one byte, or the end of the message).
enum class ReadPart { kHeader, kSome };

// Tries the synchronous Beast read on the non-blocking socket; when it would block, finishes with
// the asynchronous one (whose wait needs no epoll_ctl: an async_wait re-arms the descriptor with
// one on every wait). With `expect_data` false (nothing can have arrived yet: the answer to a
// request just sent, a keep-alive client's next request) the synchronous try, which would only
// fail, is skipped.
template <class Parser>
boost::asio::awaitable<boost::beast::error_code> ReactiveReadPart(
    boost::asio::ip::tcp::socket& socket, boost::beast::flat_buffer& buffer, Parser& parser,
    ReadPart part, bool expect_data) {
  namespace http = boost::beast::http;
  if (expect_data) {
    boost::beast::error_code ec;
    if (part == ReadPart::kHeader) {
      http::read_header(socket, buffer, parser, ec);
    } else {
      http::read_some(socket, buffer, parser, ec);
    }
    if (!WouldBlock(ec)) co_return ec;
  }
  const auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  if (part == ReadPart::kHeader) {
    auto [ec, n] = co_await http::async_read_header(socket, buffer, parser, token);
    co_return ec;
  }
  auto [ec, n] = co_await http::async_read_some(socket, buffer, parser, token);
  co_return ec;
}

// Reads until `parser` has the message's header.
template <class Parser>
boost::asio::awaitable<boost::beast::error_code> ReactiveReadHeader(
    boost::asio::ip::tcp::socket& socket, boost::beast::flat_buffer& buffer, Parser& parser,
    bool expect_data = true) {
  return ReactiveReadPart(socket, buffer, parser, ReadPart::kHeader, expect_data);
}

// Reads some of the message into `parser` (at least one byte, or the end of the message).
template <class Parser>
boost::asio::awaitable<boost::beast::error_code> ReactiveReadSome(
    boost::asio::ip::tcp::socket& socket, boost::beast::flat_buffer& buffer, Parser& parser,
    bool expect_data = true) {
  return ReactiveReadPart(socket, buffer, parser, ReadPart::kSome, expect_data);
}

}  // namespace cacheroute::http
