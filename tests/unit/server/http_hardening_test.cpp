// Hostile HTTP clients against the in-process server (issue 23): deep JSON, chunked bodies past
// the limit, header floods, slow and silent clients, missing or lying lengths, authentication
// before the body, 405/415, long model paths, tenant-scoped traces and metrics, and clients
// that hang up on a non-streaming request. Raw sockets, because httplib's client would not
// send most of these.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "edgeseek/internal/server/server.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Latency bounds stretch under ThreadSanitizer (scripts/test.sh builds this test with it) and
// under emulation (test::TimeScale: qemu-user in scripts/test_arm64.sh).
#if defined(__SANITIZE_THREAD__)
const double kSlow = 5 * test::TimeScale();
#else
const double kSlow = test::TimeScale();
#endif

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

ServerConfig HardConfig() {
  ServerConfig c = test::TinyServerConfig();
  c.http_threads = 4;
  c.limits.header_timeout_s = 1;
  c.limits.body_timeout_s = 2;
  c.limits.idle_timeout_s = 0.5;
  return c;
}

struct Up {
  std::unique_ptr<Server> srv;
  explicit Up(ServerConfig c, ModelBuilder loader = test::FakeLoader()) {
    srv = std::make_unique<Server>(std::move(c), std::move(loader));
    srv->Listen();
    srv->LoadModels();
  }
  httplib::Client Client() const {
    httplib::Client cli("127.0.0.1", srv->port());
    cli.set_read_timeout(20, 0);
    return cli;
  }
};

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (it answered)
    off += size_t(n);
  }
}

// Reads until the server closes or `wait_ms` pass; returns what came.
std::string ReadAll(int fd, int wait_ms) {
  std::string out;
  auto t0 = Clock::now();
  for (;;) {
    int left = wait_ms - int(Ms(t0));
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) break;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// One raw exchange: sends `req`, returns the answer (the connection closed, or wait_ms).
std::string Raw(int port, const std::string& req, int wait_ms = 3000) {
  int fd = Connect(port);
  SendAll(fd, req);
  std::string out = ReadAll(fd, wait_ms);
  close(fd);
  return out;
}

int StatusOf(const std::string& answer) {
  return answer.size() > 12 && answer.compare(0, 9, "HTTP/1.1 ") == 0
             ? std::stoi(answer.substr(9, 3))
             : -1;
}

json BodyOf(const std::string& answer) {
  size_t p = answer.find("\r\n\r\n");
  return p == std::string::npos ? json() : json::parse(answer.substr(p + 4), nullptr, false);
}

std::string PostHead(const std::string& path, const std::string& extra) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "\r\n";
}

bool ServesHealth(const Up& u) {
  auto cli = u.Client();
  auto r = cli.Get("/health");
  return r && r->status == 200;
}

TEST(HttpHardening, DeepToolsAnswer400AndTheServerKeepsServing) {
  Up u(HardConfig());
  std::string body = R"({"messages":[{"role":"user","content":"x"}],"tools":[)" +
                     std::string(30000, '[') + std::string(30000, ']') + "]}";
  auto cli = u.Client();
  auto r = cli.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "json_too_deep") << r->body;
  EXPECT_TRUE(ServesHealth(u));
}

TEST(HttpHardening, ChunkedBodiesHonourMaxBodyBytes) {
  Up u(HardConfig());
  std::string chunk(8192, 'a');
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
  std::string req = PostHead("/v1/completions", "Transfer-Encoding: chunked\r\n") + size +
                    "{\"prompt\":\"" + chunk.substr(11) + "\r\n";
  for (int i = 0; i < 20; ++i) req += std::string(size) + chunk + "\r\n";  // 168 KB > 64 KB
  req += "0\r\n\r\n";
  std::string ans = Raw(u.srv->port(), req);
  EXPECT_EQ(StatusOf(ans), 413) << ans.substr(0, 300);
  EXPECT_EQ(BodyOf(ans)["error"]["code"], "request_too_large");
  // A chunked body under the limit is served.
  std::string ok = R"({"prompt":"chunked","max_tokens":2})";
  std::snprintf(size, sizeof size, "%zx\r\n", ok.size());
  ans = Raw(u.srv->port(),
            PostHead("/v1/completions", "Transfer-Encoding: chunked\r\nConnection: close\r\n") +
                size + ok + "\r\n0\r\n\r\n");
  EXPECT_EQ(StatusOf(ans), 200) << ans.substr(0, 300);
}

TEST(HttpHardening, HeaderCountAndSizeAreLimited) {
  Up u(HardConfig());
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 300; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  std::string ans = Raw(u.srv->port(), many + "\r\n");
  EXPECT_EQ(StatusOf(ans), 431) << ans.substr(0, 200);
  EXPECT_NE(BodyOf(ans)["error"]["message"].get<std::string>().find("301 header lines"),
            std::string::npos)
      << ans;
  // Headers that never end: refused once past the size limit, not buffered without bound.
  std::string endless = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 5000; ++i) endless += "X-Long: " + std::string(20, 'v') + "\r\n";
  ans = Raw(u.srv->port(), endless);
  EXPECT_EQ(StatusOf(ans), 431) << ans.substr(0, 200);
  EXPECT_TRUE(ServesHealth(u));
  // The gate's own answers are counted like httplib's.
  auto cli = u.Client();
  std::string m = cli.Get("/metrics")->body;
  EXPECT_NE(m.find("edgeseek_requests_total{endpoint=\"other\",status=\"431\"} 2"),
            std::string::npos)
      << m;
}

// Issue 23: with http_threads 16, twenty sockets sending a header byte every 0.5 s locked out
// everyone else. Heads are received in the gate; workers only see complete requests.
TEST(HttpHardening, SlowHeaderClientsDoNotDelayOthers) {
  ServerConfig c = HardConfig();
  c.limits.header_timeout_s = 30;  // the drip must outlast the measurement
  c.limits.idle_timeout_s = 30;
  Up u(c);
  std::vector<int> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(Connect(u.srv->port()));
    SendAll(slow.back(), "GET /health HTTP/1.1\r\n");
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : slow) SendAll(fd, "X");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    auto t0 = Clock::now();
    std::string ans =
        Raw(u.srv->port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    worst = std::max(worst, Ms(t0));
    EXPECT_EQ(StatusOf(ans), 200);
  }
  stop = true;
  drip.join();
  for (int fd : slow) close(fd);
  EXPECT_LT(worst, 100 * kSlow) << "a request beside 20 slow-header sockets took " << worst
                                << " ms";
}

TEST(HttpHardening, SilentAndDribblingClientsAreClosedByDeadlines) {
  Up u(HardConfig());  // header_timeout_s 1, idle_timeout_s 0.5
  auto t0 = Clock::now();
  int fd = Connect(u.srv->port());
  std::string ans;
  std::thread drip([&] {
    SendAll(fd, "GET /health HTTP/1.1\r\n");
    for (int i = 0; i < 40; ++i) {
      SendAll(fd, "X");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  ans = ReadAll(fd, 5000);
  double took = Ms(t0);
  drip.join();
  close(fd);
  EXPECT_EQ(StatusOf(ans), 408) << ans;
  EXPECT_LT(took, 2500);
  EXPECT_GT(took, 900);
}

TEST(HttpHardening, MissingOrLyingContentLengthIsAnsweredPromptly) {
  Up u(HardConfig());
  auto t0 = Clock::now();
  std::string ans = Raw(u.srv->port(), PostHead("/v1/completions", "") + R"({"prompt":"x"})", 5000);
  EXPECT_EQ(StatusOf(ans), 411) << ans;
  EXPECT_LT(Ms(t0), 1000);
  // Says 100 bytes, sends 10, waits: 408 after idle_timeout_s (0.5 s), not the 30 s read timeout.
  t0 = Clock::now();
  ans = Raw(u.srv->port(), PostHead("/v1/completions", "Content-Length: 100\r\n") + R"({"prompt":)",
            5000);
  EXPECT_EQ(StatusOf(ans), 408) << ans;
  EXPECT_LT(Ms(t0), 2000);
  // The same past the gate's small-body window: the worker's read has the deadline.
  t0 = Clock::now();
  ans = Raw(u.srv->port(),
            PostHead("/v1/completions", "Content-Length: 60000\r\n") + R"({"prompt":")" +
                std::string(20000, 'a'),
            5000);
  EXPECT_EQ(StatusOf(ans), 408) << ans.substr(0, 300);
  EXPECT_EQ(BodyOf(ans)["error"]["code"], "request_timeout");
  EXPECT_LT(Ms(t0), 2000);
  for (const char* framing :
       {"Content-Length: 12abc\r\n", "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"}) {
    ans = Raw(u.srv->port(), PostHead("/v1/completions", framing) + "{}", 3000);
    EXPECT_EQ(StatusOf(ans), 400) << framing << ans;
  }
  ans = Raw(u.srv->port(), PostHead("/v1/completions", "Transfer-Encoding: gzip\r\n") + "{}", 3000);
  EXPECT_EQ(StatusOf(ans), 501) << ans;
  EXPECT_TRUE(ServesHealth(u));
}

// A connection from `src` (any 127.x address works on loopback), or -1.
int ConnectFrom(int port, const char* src) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in b{};
  b.sin_family = AF_INET;
  inet_pton(AF_INET, src, &b.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&b), sizeof b) != 0) {
    close(fd);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /health on a new connection from `src`: the status (-1: no answer).
int HealthFrom(int port, const char* src) {
  int fd = ConnectFrom(port, src);
  if (fd < 0) return -1;
  SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const int st = StatusOf(ReadAll(fd, 2000));
  close(fd);
  return st;
}

// Of `fds` (connected, nothing sent), the answers of those the server closed within `wait_ms`
// (a connection it keeps says nothing: the gate waits for its request).
std::vector<std::string> AnswersOf(const std::vector<int>& fds, int wait_ms) {
  std::vector<std::string> out;
  std::vector<bool> done(fds.size(), false);
  const auto t0 = Clock::now();
  while (Ms(t0) < wait_ms) {
    for (size_t i = 0; i < fds.size(); ++i) {
      pollfd p{fds[i], POLLIN, 0};
      if (done[i] || poll(&p, 1, 0) <= 0) continue;
      done[i] = true;
      out.push_back(ReadAll(fds[i], 1000));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return out;
}

// Connections are capped in total and per client IP (issue 23): without a cap one client could
// hold sockets until the process ran out of descriptors. One more is 503 + Retry-After at once,
// before it sends anything. (httplib hands accepted sockets to the workers, which count them in
// any order, so which of the connections is refused is not fixed; that exactly one is, is.)
TEST(HttpHardening, ConnectionCapsInTotalAndPerAddress) {
  ServerConfig c = HardConfig();
  c.limits.header_timeout_s = 30;  // the held sockets stay open through the test
  c.limits.max_connections = 5;
  c.limits.max_connections_per_ip = 3;
  Up u(c);
  const int port = u.srv->port();
  std::vector<int> first;
  for (int i = 0; i < 4; ++i) first.push_back(ConnectFrom(port, "127.0.0.1"));
  for (int fd : first) ASSERT_GE(fd, 0);
  // 4 from one address: one is refused.
  std::vector<std::string> ans = AnswersOf(first, int(1500 * kSlow));
  ASSERT_EQ(ans.size(), 1u);
  EXPECT_EQ(StatusOf(ans[0]), 503) << ans[0];
  EXPECT_NE(ans[0].find("Retry-After: 1\r\n"), std::string::npos) << ans[0];
  EXPECT_EQ(BodyOf(ans[0])["error"]["code"], "too_many_connections");
  EXPECT_EQ(BodyOf(ans[0])["error"]["type"], "server_error");
  EXPECT_NE(
      BodyOf(ans[0])["error"]["message"].get<std::string>().find("from this address (limit 3)"),
      std::string::npos)
      << ans[0];
  // 3 held; 2 more from another address reach the total of 5, and one from a third is over it.
  std::vector<int> more = {ConnectFrom(port, "127.0.0.2"), ConnectFrom(port, "127.0.0.2"),
                           ConnectFrom(port, "127.0.0.3")};
  for (int fd : more) ASSERT_GE(fd, 0);
  ans = AnswersOf(more, int(1500 * kSlow));
  ASSERT_EQ(ans.size(), 1u);
  EXPECT_EQ(StatusOf(ans[0]), 503) << ans[0];
  EXPECT_NE(BodyOf(ans[0])["error"]["message"].get<std::string>().find(
                "too many open connections (limit 5)"),
            std::string::npos)
      << ans[0];
  // Closed connections are counted out again.
  for (int fd : first) close(fd);
  for (int fd : more) close(fd);
  int st = -1;
  for (int i = 0; i < 100 && st != 200; ++i) {
    st = HealthFrom(port, "127.0.0.1");
    if (st != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(st, 200);
  EXPECT_TRUE(ServesHealth(u));
}

// At the default limits (issue 23's target: every hostile request answered within 2 s), a lying
// Content-Length is answered by the idle limit with margin; at the old default of 2 s it took
// 2.004 s in tests/server/hostile_probe.py.
TEST(HttpHardening, LyingContentLengthAtDefaultsIsAnsweredWithin2s) {
  ServerConfig c = test::TinyServerConfig();
  ASSERT_DOUBLE_EQ(c.limits.idle_timeout_s, ServerLimits{}.idle_timeout_s);
  Up u(c);
  const auto t0 = Clock::now();
  const std::string ans =
      Raw(u.srv->port(), PostHead("/v1/completions", "Content-Length: 100\r\n") + R"({"prompt":)",
          5000);
  const double ms = Ms(t0);
  EXPECT_EQ(StatusOf(ans), 408) << ans;
  EXPECT_NE(BodyOf(ans)["error"]["message"].get<std::string>().find("nothing for 1.5 s"),
            std::string::npos)
      << ans;
  EXPECT_LT(ms, 1800 * kSlow);
}

TEST(HttpHardening, AuthenticationComesBeforeTheBody) {
  ServerConfig c = HardConfig();
  c.api_keys = {"sk-a"};
  Up u(c);
  // Only the head is sent: the refusal must come without the body.
  auto t0 = Clock::now();
  std::string ans =
      Raw(u.srv->port(), PostHead("/v1/completions", "Content-Length: 50000\r\n"), 3000);
  EXPECT_EQ(StatusOf(ans), 401) << ans;
  EXPECT_LT(Ms(t0), 1000);
  // Expect: 100-continue gets the refusal instead of the go-ahead.
  ans = Raw(u.srv->port(),
            PostHead("/v1/completions", "Content-Length: 50000\r\nExpect: 100-continue\r\n"), 3000);
  EXPECT_EQ(StatusOf(ans), 401) << ans;
  // ...and a good key the go-ahead.
  std::string body = R"({"prompt":"abc","max_tokens":2})";
  int fd = Connect(u.srv->port());
  SendAll(fd, PostHead("/v1/completions",
                       "Content-Length: " + std::to_string(body.size()) +
                           "\r\nExpect: 100-continue\r\nAuthorization: Bearer sk-a\r\n"));
  std::string go = ReadAll(fd, 300);
  EXPECT_EQ(go.rfind("HTTP/1.1 100", 0), 0u) << go;
  SendAll(fd, body);
  std::string done = ReadAll(fd, 1000);
  close(fd);
  EXPECT_NE(done.find("HTTP/1.1 200"), std::string::npos) << go << "|" << done;
  // X-Api-Key is not an accepted header (only Authorization: Bearer, docs/server.md).
  auto cli = u.Client();
  auto r = cli.Post("/v1/completions", {{"X-Api-Key", "sk-a"}}, R"({"prompt":"x","max_tokens":1})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST(HttpHardening, MethodAndContentTypeAreChecked) {
  Up u(HardConfig());
  auto cli = u.Client();
  auto r = cli.Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "method_not_allowed");
  r = cli.Post("/health", "{}", "application/json");
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD");
  r = cli.Delete("/v1/models/tiny");
  EXPECT_EQ(r->status, 405);
  r = cli.Get("/v1/nowhere");
  EXPECT_EQ(r->status, 404);
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "application/jsonx"}) {
    r = cli.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})", type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415) << type;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "unsupported_media_type");
  }
  r = cli.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})",
               "Application/JSON; charset=utf-8");
  EXPECT_EQ(r->status, 200) << r->body;
}

long RssKb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

// Issue 23: "/v1/models/" + a long id went through a std::regex that recursed per character,
// growing each worker's stack by ~4.6 MB for good.
TEST(HttpHardening, LongModelPathsNeitherRecurseNorGrow) {
  Up u(HardConfig());
  auto cli = u.Client();
  std::string path = "/v1/models/" + std::string(8000, 'a');
  auto r = cli.Get(path.c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  long before = RssKb();
  for (int i = 0; i < 64; ++i) {
    r = cli.Get(path.c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  }
  EXPECT_LT(RssKb() - before, 8 * 1024) << "RSS grew over 64 long-path GETs";
  r = cli.Get(("/v1/traces/" + std::string(8000, 'z')).c_str());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(cli.Get("/v1/models/tiny")->status, 200);
}

TEST(HttpHardening, TracesAndMetricsAreScopedToTheKey) {
  ServerConfig c = HardConfig();
  c.clients = {ClientConfig{"sk-a", "alice"}, ClientConfig{"sk-b", "bob"}};
  c.metrics_keys = {"sk-ops"};
  Up u(c);
  auto cli = u.Client();
  httplib::Headers a = {{"Authorization", "Bearer sk-a"}}, b = {{"Authorization", "Bearer sk-b"}};
  auto r =
      cli.Post("/v1/completions", a, R"({"prompt":"alice's","max_tokens":3})", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  std::string id = json::parse(r->body)["id"];
  ASSERT_EQ(id.size(), std::string("cmpl-").size() + 32) << id;  // 128 random bits
  std::string trace = "/v1/traces/" + id;
  for (int i = 0; i < 200 && cli.Get(trace.c_str(), a)->status != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(cli.Get(trace.c_str(), a)->status, 200);
  EXPECT_EQ(cli.Get(trace.c_str(), b)->status, 404);
  EXPECT_EQ(cli.Get(trace.c_str())->status, 401);
  // /metrics needs a key, and a key sees only its own client's series.
  EXPECT_EQ(cli.Get("/metrics")->status, 401);
  std::string mb = cli.Get("/metrics", b)->body;
  EXPECT_EQ(mb.find("alice"), std::string::npos) << mb;
  std::string ma = cli.Get("/metrics", a)->body;
  EXPECT_NE(ma.find("edgeseek_client_generation_tokens_total{client=\"alice\"} 3"),
            std::string::npos)
      << ma;
  EXPECT_NE(ma.find("edgeseek_ready 1"), std::string::npos);
  // The operator's key sees every client, and only /metrics.
  std::string mo = cli.Get("/metrics", {{"Authorization", "Bearer sk-ops"}})->body;
  EXPECT_NE(mo.find("edgeseek_client_generation_tokens_total{client=\"alice\"} 3"),
            std::string::npos)
      << mo;
  EXPECT_EQ(cli.Get("/v1/models", {{"Authorization", "Bearer sk-ops"}})->status, 401);
}

TEST(HttpHardening, PublicMetricsLeaveClientsOut) {
  ServerConfig c = HardConfig();
  c.clients = {ClientConfig{"sk-a", "alice"}};
  c.metrics_public = true;
  Up u(c);
  auto cli = u.Client();
  auto r = cli.Post("/v1/completions", {{"Authorization", "Bearer sk-a"}},
                    R"({"prompt":"x","max_tokens":2})", "application/json");
  ASSERT_EQ(r->status, 200);
  r = cli.Get("/metrics");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find("alice"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("edgeseek_ready 1"), std::string::npos);
  EXPECT_EQ(cli.Get("/metrics", {{"Authorization", "Bearer wrong"}})->status, 401);
}

double MetricValue(const std::string& text, const std::string& series) {
  size_t p = text.find(series + " ");
  return p == std::string::npos ? -1 : std::stod(text.substr(p + series.size() + 1));
}

// Issue 23: a non-streaming client that hung up kept its request running to max_tokens.
TEST(HttpHardening, ANonStreamingClientThatHangsUpIsCancelled) {
  Up u(HardConfig(), test::FakeLoader(0.05));  // 50 ms a step: 60 tokens would take 3 s
  std::string body = R"({"prompt":"long","max_tokens":60,"ignore_eos":true})";
  int fd = Connect(u.srv->port());
  SendAll(fd,
          PostHead("/v1/completions", "Content-Length: " + std::to_string(body.size()) + "\r\n") +
              body);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = Clock::now();
  close(fd);
  auto cli = u.Client();
  std::string m;
  double cancelled = -1;
  while (Ms(t0) < 2500) {
    m = cli.Get("/metrics")->body;
    cancelled = MetricValue(m, R"(edgeseek_request_finish_total{model="tiny",reason="cancelled"})");
    if (cancelled >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(cancelled, 1) << m;
  EXPECT_LT(Ms(t0), 1500) << "cancellation took " << Ms(t0) << " ms";
  EXPECT_EQ(MetricValue(m, R"(edgeseek_running_sequences{model="tiny",instance="0"})"), 0) << m;
}

}  // namespace
}  // namespace es
