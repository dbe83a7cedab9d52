// The connection gate (connection_gate.h). A connection is owned by exactly one thread at a
// time: the gate while it waits for bytes, then one worker while a request is processed; the
// hand-over goes through the gate's mutex-guarded inbox or the thread pool's queue.
//
//   accept (httplib) → process_and_close_socket → gate: poll until the head (and a body of at
//   most gate_body_bytes) is in, or 431/408 → worker: process_request over ConnStream → gate
//   (keep-alive) or close
#include "connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker_pool.h"

namespace es::server {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int PollMs(double until, double now) {
  double ms = (until - now) * 1000.0;
  return ms <= 0 ? 0 : ms > 1000 ? 1000 : int(ms) + 1;
}

// Open connections in total and per client IP, against ReceiveLimits' caps.
class ConnCounts {
 public:
  // Counts a connection from `ip` in; false (nothing counted) when a cap is reached, *per_ip
  // telling which.
  bool Acquire(const std::string& ip, const ReceiveLimits& lim, bool* per_ip) {
    std::lock_guard<std::mutex> lock(mu_);
    *per_ip = false;
    if (total_ >= lim.max_connections) return false;
    size_t& n = per_ip_[ip];
    if (n >= lim.max_connections_per_ip) {
      *per_ip = true;
      if (n == 0) per_ip_.erase(ip);
      return false;
    }
    ++n;
    ++total_;
    return true;
  }
  void Release(const std::string& ip) {
    std::lock_guard<std::mutex> lock(mu_);
    --total_;
    auto it = per_ip_.find(ip);
    if (it != per_ip_.end() && --it->second == 0) per_ip_.erase(it);
  }
  size_t total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  mutable std::mutex mu_;
  size_t total_ = 0;
  std::unordered_map<std::string, size_t> per_ip_;
};

// One client connection and what has been received on it but not yet consumed.
struct Conn {
  int fd = -1;
  ConnCounts* counts = nullptr;  // counted in there (as `ip`) while it lives
  std::string ip;
  std::string buf;  // received bytes; [off, size) not yet consumed by a request
  size_t off = 0;
  size_t scan = 0;  // the head search resumes here (index into buf)
  enum class Phase { kHead, kBody, kIdle, kLinger } phase = Phase::kHead;
  double phase_deadline = 0;
  double last_byte = 0;
  bool got_bytes = false;  // of the request now being received
  size_t need = 0;         // kBody: bytes of buf (from off) that complete the request
  size_t requests = 0;
  // Worker side, reset per request.
  double body_deadline = 0;
  bool timed_out = false;
  bool close_after = false;

  ~Conn() {
    if (fd >= 0) close(fd);
    if (counts) counts->Release(ip);
  }
  size_t pending() const { return buf.size() - off; }
  void Compact() {
    if (off == 0) return;
    buf.erase(0, off);
    scan = scan > off ? scan - off : 0;
    off = 0;
  }
};

thread_local Conn* tl_conn = nullptr;

bool IEquals(const char* a, size_t n, const char* lit) {
  size_t m = std::strlen(lit);
  if (n != m) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower((unsigned char)a[i]) != lit[i]) return false;
  return true;
}

// What a complete head says about the body that follows.
struct HeadInfo {
  int lines = 0;  // header lines
  bool chunked_or_expect = false;
  bool has_length = false;
  uint64_t length = 0;
};

HeadInfo ScanHead(const char* p, size_t n) {
  HeadInfo h;
  size_t line = 0;
  bool first = true;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (p[i] != '\r' || p[i + 1] != '\n') continue;
    const char* s = p + line;
    size_t len = i - line;
    line = i + 2;
    if (first) {
      first = false;
      continue;
    }
    if (len == 0) break;
    ++h.lines;
    const char* colon = static_cast<const char*>(std::memchr(s, ':', len));
    if (!colon) continue;
    size_t klen = size_t(colon - s);
    if (IEquals(s, klen, "transfer-encoding") || IEquals(s, klen, "expect"))
      h.chunked_or_expect = true;
    if (IEquals(s, klen, "content-length")) {
      const char* v = colon + 1;
      const char* e = s + len;
      while (v < e && (*v == ' ' || *v == '\t')) ++v;
      uint64_t x = 0;
      bool ok = v < e;
      for (; v < e && *v != ' ' && *v != '\t'; ++v) {
        if (*v < '0' || *v > '9' || x > (uint64_t(1) << 50)) {
          ok = false;
          break;
        }
        x = x * 10 + uint64_t(*v - '0');
      }
      // A malformed or repeated length is the worker's to refuse: dispatch at once.
      if (!ok || h.has_length) h.chunked_or_expect = true;
      h.has_length = true;
      h.length = x;
    }
  }
  return h;
}

// "1.5 s", "10 s" (std::to_string(double) gives 6 decimals).
std::string Seconds(double s) {
  std::ostringstream o;
  o << s << " s";
  return o.str();
}

// A small error answer written from the gate (non-blocking; it fits any send buffer).
void SendGateError(int fd, int status, const char* reason, const std::string& message,
                   const char* code, const char* type = "invalid_request_error",
                   const char* extra_headers = "") {
  std::string body = std::string(R"({"error":{"message":")") + message + R"(","type":")" + type +
                     R"(","param":null,"code":")" + code + R"("}})";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                    "\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra_headers +
                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ssize_t w = send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

std::string PeerOrLocal(int fd, bool peer, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *port = 0;
  if (rc != 0) return {};
  char ip[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    *port = ntohs(a->sin6_port);
  }
  return ip;
}

// httplib's view of a connection on a worker: reads come from what the gate received first,
// then from the socket under the body deadline and the idle limit.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn* c, const ReceiveLimits& lim, double write_timeout_s)
      : c_(c), lim_(lim), write_timeout_s_(write_timeout_s) {}

  bool is_readable() const override {
    if (c_->pending() > 0) return true;
    pollfd p{c_->fd, POLLIN, 0};
    return poll(&p, 1, PollMs(Now() + lim_.idle_timeout_s, Now())) > 0;
  }
  bool is_writable() const override {
    pollfd p{c_->fd, POLLOUT, 0};
    if (poll(&p, 1, int(write_timeout_s_ * 1000)) <= 0 || (p.revents & (POLLERR | POLLHUP)))
      return false;
    char b;
    return recv(c_->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0;  // 0: the client closed
  }
  ssize_t read(char* ptr, size_t size) override {
    if (c_->pending() == 0) {
      c_->buf.clear();
      c_->off = c_->scan = 0;
      ssize_t n = Fill();
      if (n <= 0) return n;
    }
    size_t n = std::min(size, c_->pending());
    std::memcpy(ptr, c_->buf.data() + c_->off, n);
    c_->off += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return send(c_->fd, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = PeerOrLocal(c_->fd, true, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = PeerOrLocal(c_->fd, false, &port);
  }
  socket_t socket() const override { return c_->fd; }

 private:
  ssize_t Fill() {
    double last = Now();
    for (;;) {
      double now = Now();
      double until = std::min(c_->body_deadline, last + lim_.idle_timeout_s);
      if (now >= until) {
        c_->timed_out = true;
        return -1;
      }
      pollfd p{c_->fd, POLLIN, 0};
      int r = poll(&p, 1, PollMs(until, now));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -1;
      if (r == 0) continue;
      char tmp[16 << 10];
      ssize_t n = recv(c_->fd, tmp, sizeof tmp, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return n;
      c_->buf.append(tmp, size_t(n));
      return n;
    }
  }

  Conn* c_;
  const ReceiveLimits& lim_;
  double write_timeout_s_;
};

// Worker threads: httplib's pool, whose shutdown first stops the gate (so nothing is handed to
// a pool that is going away).
class GatePool : public httplib::TaskQueue {
 public:
  GatePool(GatedServer::Impl* gate, int n) : gate_(gate), pool_(size_t(n)) {}
  void enqueue(std::function<void()> fn) override { pool_.Enqueue(std::move(fn)); }
  void shutdown() override;
  size_t threads_used() const { return pool_.threads_used(); }

 private:
  GatedServer::Impl* gate_;
  WorkerPool pool_;  // LIFO: see worker_pool.h
};

}  // namespace

struct GatedServer::Impl {
  GatedServer* owner;
  ReceiveLimits lim;
  std::function<void(int)> observer;  // set before the gate starts; read on its thread
  ConnCounts counts;
  int workers;
  std::mutex mu;             // guards inbox, stopped, pool, held
  std::vector<Conn*> inbox;  // handed to the gate, not yet in its poll set
  bool stopped = true;
  GatePool* pool = nullptr;
  size_t held = 0;
  int wake[2] = {-1, -1};
  std::thread thread;

  Impl(GatedServer* o, ReceiveLimits l, int w) : owner(o), lim(l), workers(w) {
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) wake[0] = wake[1] = -1;
  }
  ~Impl() {
    Stop();
    for (int fd : wake)
      if (fd >= 0) close(fd);
  }

  void Start(GatePool* p) {
    std::lock_guard<std::mutex> lock(mu);
    pool = p;
    stopped = false;
    thread = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopped) return;
      stopped = true;
      pool = nullptr;
    }
    Wake();
    if (thread.joinable()) thread.join();
  }
  void Wake() {
    char c = 1;
    ssize_t w = write(wake[1], &c, 1);
    (void)w;
  }

  // From any thread: the gate takes `c` over (or closes it when stopped).
  void Add(Conn* c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!stopped) {
        inbox.push_back(c);
        c = nullptr;
      }
    }
    if (c)
      delete c;
    else
      Wake();
  }

  void Observe(int status) {
    if (observer) observer(status);
  }

  void BeginRequest(Conn* c, double now) {
    c->phase = Conn::Phase::kHead;
    c->phase_deadline = now + lim.header_timeout_s;
    c->got_bytes = c->pending() > 0;
    c->last_byte = now;
  }
  void BeginLinger(Conn* c, double now) {
    shutdown(c->fd, SHUT_WR);
    c->phase = Conn::Phase::kLinger;
    c->phase_deadline = now + 2;
  }

  // Looks at what `c` has received. true: the request is ready for a worker.
  bool Check(Conn* c, double now) {
    if (c->phase == Conn::Phase::kIdle) {
      if (c->pending() == 0) return false;
      BeginRequest(c, now);
    }
    if (c->phase == Conn::Phase::kHead) {
      const char* base = c->buf.data() + c->off;
      size_t n = c->pending();
      size_t from = c->scan > c->off + 3 ? c->scan - c->off - 3 : 0;
      const char* end = nullptr;
      for (size_t i = from; i + 3 < n; ++i)
        if (base[i] == '\r' && std::memcmp(base + i, "\r\n\r\n", 4) == 0) {
          end = base + i + 4;
          break;
        }
      if (!end) {
        c->scan = c->off + n;
        if (n > lim.max_head_bytes) {
          Observe(431);
          SendGateError(c->fd, 431, "Request Header Fields Too Large",
                        "request headers exceed " + std::to_string(lim.max_head_bytes) + " bytes",
                        "headers_too_large");
          BeginLinger(c, now);
        }
        return false;
      }
      c->scan = 0;  // the next request's search starts where that request does
      size_t head = size_t(end - base);
      HeadInfo h = ScanHead(base, head);
      if (head > lim.max_head_bytes || h.lines > lim.max_headers) {
        Observe(431);
        SendGateError(
            c->fd, 431, "Request Header Fields Too Large",
            h.lines > lim.max_headers
                ? "request has " + std::to_string(h.lines) + " header lines; at most " +
                      std::to_string(lim.max_headers) + " are allowed"
                : "request headers exceed " + std::to_string(lim.max_head_bytes) + " bytes",
            "headers_too_large");
        BeginLinger(c, now);
        return false;
      }
      if (h.chunked_or_expect || !h.has_length || h.length > lim.gate_body_bytes) return true;
      c->phase = Conn::Phase::kBody;
      c->need = head + size_t(h.length);
      c->phase_deadline = now + lim.body_timeout_s;
    }
    if (c->phase == Conn::Phase::kBody) return c->pending() >= c->need;
    return false;
  }

  // Reads what the socket has. false: the connection is finished (closed by the client, error).
  bool Receive(Conn* c, double now) {
    char tmp[16 << 10];
    for (;;) {
      size_t room = c->phase == Conn::Phase::kLinger ? sizeof tmp
                    : c->phase == Conn::Phase::kBody
                        ? std::min(sizeof tmp, c->need - std::min(c->need, c->pending()))
                        : std::min(sizeof tmp, lim.max_head_bytes + 1 -
                                                   std::min(lim.max_head_bytes + 1, c->pending()));
      if (room == 0) return true;
      ssize_t n = recv(c->fd, tmp, room, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      if (c->phase == Conn::Phase::kLinger) continue;  // discarded
      if (c->phase == Conn::Phase::kIdle && c->pending() == 0) BeginRequest(c, now);
      c->Compact();
      c->buf.append(tmp, size_t(n));
      c->got_bytes = true;
      c->last_byte = now;
      if (size_t(n) < room) return true;
    }
  }

  // The gate's deadline for `c`: the phase's, and the idle limit once a request has begun.
  double Deadline(const Conn* c) const {
    double d = c->phase_deadline;
    if ((c->phase == Conn::Phase::kHead || c->phase == Conn::Phase::kBody) && c->got_bytes)
      d = std::min(d, c->last_byte + lim.idle_timeout_s);
    return d;
  }

  void TimeOut(Conn* c, double now, std::vector<Conn*>* keep) {
    if (c->phase == Conn::Phase::kLinger || c->phase == Conn::Phase::kIdle || !c->got_bytes) {
      delete c;  // nothing was asked, or the answer is out: close quietly
      return;
    }
    bool head = c->phase == Conn::Phase::kHead;
    Observe(408);
    SendGateError(c->fd, 408, "Request Timeout",
                  std::string(head ? "request headers" : "request body") +
                      " not received in time (" +
                      (now >= c->phase_deadline
                           ? "limit " + Seconds(head ? lim.header_timeout_s : lim.body_timeout_s)
                           : "nothing for " + Seconds(lim.idle_timeout_s)) +
                      ")",
                  "request_timeout");
    BeginLinger(c, now);
    keep->push_back(c);
  }

  void Dispatch(Conn* c) {
    GatePool* p;
    {
      std::lock_guard<std::mutex> lock(mu);
      p = pool;
    }
    if (!p) {
      delete c;
      return;
    }
    p->enqueue([this, c] { Serve(c); });
  }

  void Loop() {
    std::vector<Conn*> conns;
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopped) break;
        double now = Now();
        for (Conn* c : inbox) {
          conns.push_back(c);
          if (Check(c, now)) {  // pipelined or already complete
            conns.pop_back();
            inbox_ready.push_back(c);
          }
        }
        inbox.clear();
        held = conns.size();
      }
      for (Conn* c : inbox_ready) Dispatch(c);
      inbox_ready.clear();

      double now = Now();
      double next = now + 1;
      fds.assign(1, pollfd{wake[0], POLLIN, 0});
      for (Conn* c : conns) {
        fds.push_back(pollfd{c->fd, POLLIN, 0});
        next = std::min(next, Deadline(c));
      }
      int r = poll(fds.data(), fds.size(), PollMs(next, now));
      if (r < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        char b[64];
        ssize_t n = read(wake[0], b, sizeof b);
        (void)n;
      }
      now = Now();
      std::vector<Conn*> keep;
      keep.reserve(conns.size());
      for (size_t i = 0; i < conns.size(); ++i) {
        Conn* c = conns[i];
        if (r > 0 && fds[i + 1].revents) {
          if (!Receive(c, now)) {
            delete c;
            continue;
          }
          if (c->phase != Conn::Phase::kLinger && Check(c, now)) {
            Dispatch(c);
            continue;
          }
        }
        if (now >= Deadline(c)) {
          TimeOut(c, now, &keep);
          continue;
        }
        keep.push_back(c);
      }
      conns.swap(keep);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (Conn* c : conns) delete c;
    for (Conn* c : inbox) delete c;
    inbox.clear();
    held = 0;
  }
  std::vector<Conn*> inbox_ready;  // gate thread only

  // On a worker: the requests `c` has ready, then back to the gate or closed.
  void Serve(Conn* c) {
    tl_conn = c;
    c->body_deadline = Now() + lim.body_timeout_s;
    c->timed_out = c->close_after = false;
    ConnStream strm(c, lim, double(owner->write_timeout_sec_) + owner->write_timeout_usec_ / 1e6);
    bool last = ++c->requests >= owner->keep_alive_max_count_ || owner->svr_sock_ == INVALID_SOCKET;
    bool closed = false;
    bool ok = owner->process_request(strm, last, closed, nullptr);
    tl_conn = nullptr;
    double now = Now();
    if (!ok || owner->svr_sock_ == INVALID_SOCKET) {
      delete c;
      return;
    }
    // Closed after the answer: lingering (our side shut, what still comes discarded) keeps a
    // close with unread input from resetting the connection before the client reads the answer.
    if (closed || last || c->close_after || c->timed_out) {
      BeginLinger(c, now);
    } else {
      c->Compact();
      c->phase = Conn::Phase::kIdle;
      c->phase_deadline = now + lim.keep_alive_s;
      c->got_bytes = false;
    }
    Add(c);
  }
};

void GatePool::shutdown() {
  gate_->Stop();
  pool_.Shutdown();
}

GatedServer::GatedServer(ReceiveLimits limits, int workers)
    : impl_(std::make_unique<Impl>(this, limits, workers)) {
  new_task_queue = [this] {
    auto* p = new GatePool(impl_.get(), impl_->workers);
    impl_->Start(p);
    return p;
  };
}

GatedServer::~GatedServer() { impl_->Stop(); }

bool GatedServer::process_and_close_socket(socket_t sock) {
  // httplib writes a response's head and body in two sends; with Nagle's algorithm the body then
  // waits for the client's delayed ACK: 40 ms on every small answer (measured: /health took
  // 44 ms on loopback, a few ms with this on the shared 2-core build machine).
  int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int port = 0;
  std::string ip = PeerOrLocal(sock, true, &port);
  bool per_ip = false;
  if (!impl_->counts.Acquire(ip, impl_->lim, &per_ip)) {
    RefuseOverCap(sock, per_ip);
    return true;
  }
  auto* c = new Conn;
  c->fd = sock;
  c->counts = &impl_->counts;
  c->ip = std::move(ip);
  impl_->BeginRequest(c, Now());
  impl_->Add(c);
  return true;
}

// Over a connection cap: 503 at once and closed, never held (a held refusal would itself be an
// open connection). What the client already sent is read first, so the close does not reset
// the connection before the answer is read.
void GatedServer::RefuseOverCap(socket_t sock, bool per_ip) {
  impl_->Observe(503);
  char tmp[16 << 10];
  while (recv(sock, tmp, sizeof tmp, MSG_DONTWAIT) > 0) {
  }
  const std::string msg = per_ip ? "too many open connections from this address (limit " +
                                       std::to_string(impl_->lim.max_connections_per_ip) + ")"
                                 : "too many open connections (limit " +
                                       std::to_string(impl_->lim.max_connections) + ")";
  SendGateError(sock, 503, "Service Unavailable", msg, "too_many_connections", "server_error",
                "Retry-After: 1\r\n");
  shutdown(sock, SHUT_WR);
  close(sock);
}

bool GatedServer::ClientGone() {
  Conn* c = tl_conn;
  if (!c) return false;
  pollfd p{c->fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP)) return true;
  char b;
  return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void GatedServer::CloseAfterResponse() {
  if (tl_conn) tl_conn->close_after = true;
}

bool GatedServer::ReceiveTimedOut() { return tl_conn && tl_conn->timed_out; }

void GatedServer::WidenListenBacklog() {
  socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);  // on Linux, listen() again resizes the queue
}

void GatedServer::set_gate_observer(std::function<void(int status)> fn) {
  impl_->observer = std::move(fn);
}

size_t GatedServer::open_connections() const { return impl_->counts.total(); }

size_t GatedServer::gate_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->held + impl_->inbox.size();
}

}  // namespace es::server
