// MetricsEndpoint against clients that hold its connections (issue #43.3): trickling, idle and
// half-sent connections are closed at their deadline or make room for new ones, a connection past
// the caps with nothing to make room gets a 503 at once, and scrapes keep their idle latency while
// 1,000 such connections are held against the port (CI's two shared cores bear that many beside the
// rest of the suite; the attack suite's --full run takes 5,000 against the real server).
#include "graphserve/server/observability/metrics_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "graphserve/server/observability/metrics.h"
#include "http_get.h"
#include "prometheus_text.h"

namespace graphserve {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Exposition;

// As deploy/bench/attack_suite.py's JITTER_FLOOR_MS: two shared cores give idle p99s of a few ms to
// tens of ms from one run to the next.
constexpr std::chrono::milliseconds kJitterFloor{50};

MetricsEndpointOptions OnLoopback() {
  MetricsEndpointOptions options;
  options.address = "127.0.0.1:0";
  return options;
}

// A connection to the endpoint from `source` (any 127.0.0.0/8 address); -1 when it failed.
int Connect(int port, const char* source = "127.0.0.1", int receive_buffer = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` (or answered and closed) within `wait`; reads whatever came first.
bool ClosedByServer(int fd, std::chrono::milliseconds wait, std::string* received = nullptr) {
  const auto give_up = Clock::now() + wait;
  while (Clock::now() < give_up) {
    pollfd watched{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
    if (poll(&watched, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) return false;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    if (n > 0 && received != nullptr) received->append(buffer, static_cast<size_t>(n));
  }
  return false;
}

double Counted(const ServerMetrics& metrics, const char* family, const char* reason) {
  return Exposition(metrics.TextExposition()).One(family, {{"endpoint", "metrics"}, {"reason", reason}});
}

// Scrapes one after another until `until`, at least `count` of them; adds how long each took to
// `took`, and fails the test for any that was not answered 200.
void Scrape(int port, int count, Clock::time_point until, std::vector<std::chrono::microseconds>* took) {
  for (int i = 0; i < count || Clock::now() < until; ++i) {
    const auto start = Clock::now();
    const int status = testing::HttpGet(port, "/metrics", /*timeout_s=*/10).status;
    took->push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start));
    EXPECT_EQ(status, 200) << "scrape " << i;
  }
}

std::chrono::microseconds P99(std::vector<std::chrono::microseconds> took) {
  std::sort(took.begin(), took.end());
  return took[std::min(took.size() - 1, took.size() * 99 / 100)];
}

TEST(MetricsEndpointBoundsTest, AConnectionThatTricklesIsClosedAtTheTimeoutWhateverItSends) {
  ServerMetrics metrics{ServerMetricsOptions()};
  MetricsEndpointOptions options = OnLoopback();
  options.client_timeout = std::chrono::milliseconds(1000);
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(options, &metrics, &endpoint).ok());
  const int trickler = Connect(endpoint->port());
  const int idle = Connect(endpoint->port());
  ASSERT_GE(trickler, 0);
  ASSERT_GE(idle, 0);
  const auto start = Clock::now();
  ASSERT_EQ(send(trickler, "GET /metrics HTTP/1.1\r\nX-Slow: ", 31, MSG_NOSIGNAL), 31);
  bool closed = false;
  // A byte every 50 ms: libmicrohttpd's own idle timeout alone would never fire.
  while (!closed && Clock::now() - start < std::chrono::seconds(5)) {
    closed =
        send(trickler, "a", 1, MSG_NOSIGNAL) != 1 || ClosedByServer(trickler, std::chrono::milliseconds(50));
  }
  const auto took = Clock::now() - start;
  EXPECT_TRUE(closed);
  EXPECT_GE(took, options.client_timeout);
  EXPECT_LT(took,
            options.client_timeout + 3 * MetricsEndpoint::kDeadlineCheck + std::chrono::milliseconds(500));
  EXPECT_TRUE(ClosedByServer(idle, std::chrono::milliseconds(1000)));
  EXPECT_EQ(Counted(metrics, "graphserve_connections_closed_total", "client_timeout"), 2.0);
  close(trickler);
  close(idle);
}

TEST(MetricsEndpointBoundsTest, PastTheCapTheOldestWaitingConnectionMakesRoomForAScrape) {
  ServerMetrics metrics{ServerMetricsOptions()};
  MetricsEndpointOptions options = OnLoopback();
  options.max_connections = 4;
  options.max_connections_per_address = 4;
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(options, &metrics, &endpoint).ok());
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(Connect(endpoint->port()));
    ASSERT_GE(idle.back(), 0);
    ASSERT_EQ(send(idle.back(), "GET /met", 8, MSG_NOSIGNAL), 8);  // half a request line, then nothing
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all four accepted
  const auto start = Clock::now();
  EXPECT_EQ(testing::HttpGet(endpoint->port(), "/metrics", /*timeout_s=*/10).status, 200);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  // The first one made room; the others are still open.
  EXPECT_TRUE(ClosedByServer(idle[0], std::chrono::milliseconds(500)));
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(ClosedByServer(idle[i], std::chrono::milliseconds(10))) << i;
  EXPECT_EQ(Counted(metrics, "graphserve_connections_closed_total", "evicted"), 1.0);
  for (int fd : idle) close(fd);
}

TEST(MetricsEndpointBoundsTest, PastAnAddresssCapOnlyThatAddressMakesRoom) {
  ServerMetrics metrics{ServerMetricsOptions()};
  MetricsEndpointOptions options = OnLoopback();
  options.max_connections_per_address = 2;
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(options, &metrics, &endpoint).ok());
  const int other = Connect(endpoint->port(), "127.0.0.3");
  ASSERT_GE(other, 0);
  std::vector<int> greedy;
  for (int i = 0; i < 3; ++i) {
    greedy.push_back(Connect(endpoint->port(), "127.0.0.2"));
    ASSERT_GE(greedy.back(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // accepted in this order
  }
  EXPECT_TRUE(ClosedByServer(greedy[0], std::chrono::milliseconds(500)));
  EXPECT_FALSE(ClosedByServer(greedy[1], std::chrono::milliseconds(10)));
  EXPECT_FALSE(ClosedByServer(greedy[2], std::chrono::milliseconds(10)));
  // 127.0.0.3's connection is older than all of them, and stays.
  EXPECT_FALSE(ClosedByServer(other, std::chrono::milliseconds(10)));
  for (int fd : greedy) close(fd);
  close(other);
}

TEST(MetricsEndpointBoundsTest, WhenEveryConnectionIsBeingAnsweredANewOneGets503AtOnce) {
  ServerMetrics metrics{ServerMetricsOptions()};
  MetricsEndpointOptions options = OnLoopback();
  options.max_connections = 2;
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(options, &metrics, &endpoint).ok());
  // An exposition of some MiB (series of refusals by made-up reasons), and two clients that ask for
  // it and read none of it: the server's socket buffer fills and each stays mid-answer.
  for (int i = 0; i < 40000; ++i) metrics.CountRefusedConnection("metrics", "reason_" + std::to_string(i));
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    // From addresses of their own, so that the port's cap, not an address's, is what the late one meets.
    stalled.push_back(Connect(endpoint->port(), i == 0 ? "127.0.0.2" : "127.0.0.3", /*receive_buffer=*/4096));
    ASSERT_GE(stalled.back(), 0);
    ASSERT_EQ(send(stalled.back(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 34, MSG_NOSIGNAL), 34);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int late = Connect(endpoint->port());
  ASSERT_GE(late, 0);
  std::string answer;
  const auto start = Clock::now();
  EXPECT_TRUE(ClosedByServer(late, std::chrono::milliseconds(2000), &answer));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_EQ(Counted(metrics, "graphserve_connections_refused_total", "connection_cap"), 1.0);
  close(late);
  for (int fd : stalled) close(fd);
}

// The attack, in-process: 1,000 connections from one address (127.0.0.2), a third idle, a third
// sending half a request line and stopping, a third trickling a header byte every 100 ms, each
// reopened within a second of the server closing it, as slowloris tools do, for longer than the
// client timeout. Scrapes from another address (Prometheus's own) all succeed, with the p99 of idle
// (twice it, plus the attack suite's floor for a loaded machine's jitter). A scraper that shares the
// attacker's address is not protected from such churn: the gate cannot tell its connection from the
// attacker's.
TEST(MetricsEndpointBoundsTest, ScrapesKeepTheirLatencyWhileAThousandSlowConnectionsAreHeld) {
  constexpr int kConnections = 1000;
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < 4 * kConnections && files.rlim_max >= 4 * kConnections) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < 4 * kConnections) GTEST_SKIP() << "needs ulimit -n " << 4 * kConnections;
  ServerMetrics metrics{ServerMetricsOptions()};
  MetricsEndpointOptions options = OnLoopback();
  options.client_timeout = std::chrono::milliseconds(2000);
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(options, &metrics, &endpoint).ok());
  const int port = endpoint->port();
  std::vector<std::chrono::microseconds> idle, attacked;
  Scrape(port, 200, Clock::now(), &idle);

  std::atomic<bool> stop{false};
  std::atomic<int> reopened{0};
  std::thread attacker([&] {
    std::vector<int> held(kConnections, -1);
    const auto open = [&](int i) {
      held[i] = Connect(port, "127.0.0.2");
      if (held[i] < 0) return;
      fcntl(held[i], F_SETFL, O_NONBLOCK);
      if (i % 3 == 1) send(held[i], "GET /met", 8, MSG_NOSIGNAL);
      if (i % 3 == 2) send(held[i], "GET /metrics HTTP/1.1\r\nX-Slow: ", 31, MSG_NOSIGNAL);
    };
    for (int i = 0; i < kConnections; ++i) open(i);
    for (int round = 1; !stop; ++round) {
      for (int i = 0; i < kConnections && !stop; ++i) {
        char byte;
        const ssize_t n = held[i] < 0 ? 0 : recv(held[i], &byte, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          // Reopened once a second, as slowloris tools do.
          if (round % 10 != 0) continue;
          if (held[i] >= 0) close(held[i]);
          open(i);
          ++reopened;
        } else if (i % 3 == 2) {
          send(held[i], "a", 1, MSG_NOSIGNAL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : held) {
      if (fd >= 0) close(fd);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the flood is in
  // Scrapes for longer than the client timeout, so that the deadlines' closes happen meanwhile too.
  Scrape(port, 200, Clock::now() + 2 * options.client_timeout, &attacked);
  stop = true;
  attacker.join();
  std::printf(
      "scrape p99: idle %.2f ms, under %d slow connections %.2f ms; %d reopened after the server "
      "closed them; closed: %.0f timed out, %.0f evicted\n",
      P99(idle).count() / 1000.0, kConnections, P99(attacked).count() / 1000.0, reopened.load(),
      Counted(metrics, "graphserve_connections_closed_total", "client_timeout"),
      Counted(metrics, "graphserve_connections_closed_total", "evicted"));
  EXPECT_LE(P99(attacked), 2 * P99(idle) + kJitterFloor) << attacked.size() << " scrapes";
  EXPECT_GT(reopened.load(), kConnections / 2);  // the attack really was turned away and came back
  EXPECT_LE(endpoint->max_connections(), 64);
}

}  // namespace
}  // namespace graphserve
