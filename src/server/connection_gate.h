// Connection handling beneath cpp-httplib's request processing: a gate thread receives each
// request's head (and a small body) with poll() before a worker thread is taken, so slow or
// silent clients never hold an HTTP thread; workers read the rest through a stream with body
// deadlines. Idle keep-alive connections wait in the gate too.
//
// Why: cpp-httplib 0.11 reads headers on the worker with only a per-read timeout, so twenty
// sockets sending one header byte every 0.5 s held twenty workers indefinitely (issue 23), and
// it accepts any number of headers. Its public extension points (Server::process_and_close_socket,
// process_request, Stream, TaskQueue) let the socket handling be replaced while its request
// parsing, routing and response writing stay as they are.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>

namespace es::server {

struct ReceiveLimits {
  size_t max_head_bytes = 32 << 10;  // request line + headers
  int max_headers = 100;
  double header_timeout_s =
      10;                      // from accept (or the first byte after keep-alive) to the head's end
  double body_timeout_s = 60;  // from the head's end to the body's end
  double idle_timeout_s = 1.5;  // the longest silence inside a request
  double keep_alive_s = 5;      // an idle keep-alive connection is closed after this
  // Bodies with a Content-Length up to this are received in the gate, before a worker is taken;
  // small enough to fit a socket's default receive buffer, so a client is never stalled by it.
  size_t gate_body_bytes = 16 << 10;
  // Open connections (waiting, idle keep-alive or being served), in total and from one client
  // IP; one more is answered 503 with Retry-After at accept and closed. Each holds a file
  // descriptor and gate memory, so without a cap a single client could open sockets until the
  // process ran out of descriptors and locked everyone out.
  size_t max_connections = 1024;
  size_t max_connections_per_ip = 256;
};

class GatedServer : public httplib::Server {
 public:
  GatedServer(ReceiveLimits limits, int workers);
  ~GatedServer() override;

  // For a handler, on its worker thread: whether its client has closed the connection.
  static bool ClientGone();
  // For a handler: close the connection after this response (its body was not read to the end).
  static void CloseAfterResponse();
  // For a handler whose body read failed: whether a receive deadline ended it.
  static bool ReceiveTimedOut();
  // Connections the gate holds now (waiting for a request head or body, or idle); for tests.
  size_t gate_connections() const;
  // Connections open now (counted against max_connections), for tests.
  size_t open_connections() const;
  // After bind_to_port / bind_to_any_port: a listen backlog of SOMAXCONN instead of httplib's
  // 5. With 5, a burst of new connections overflowed the accept queue and the kernel dropped
  // SYNs, which clients resend after 1 s (measured: a connect beside 20 others took 1.02 s).
  void WidenListenBacklog();
  // Called with the status of every answer the gate gives itself (408, 431 on the gate thread;
  // 503 for a connection over the caps on the worker that httplib hands the accepted socket to),
  // which httplib's logger never sees. Set before listening; must be thread-safe.
  void set_gate_observer(std::function<void(int status)> fn);

  struct Impl;

 private:
  bool process_and_close_socket(socket_t sock) override;  // takes the socket over
  void RefuseOverCap(socket_t sock, bool per_ip);
  std::unique_ptr<Impl> impl_;
};

}  // namespace es::server
