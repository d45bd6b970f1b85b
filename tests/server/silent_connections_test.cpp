// SilentConnections over real loopback connections: past the grace the oldest silent connection is
// shut down first (its client reads the end), one that sent less than an opening is silent, one
// that spoke is never shut and is forgotten, a closed connection whose number a new socket took is
// not shut in its place, and what is tracked stays bounded when connections come and go.
#include "common/silent_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "loopback_listener.h"

namespace graphserve {
namespace {

using std::chrono::seconds;

class SilentConnectionsTest : public ::testing::Test {
 protected:
  struct Pair {
    int client;
    int server;
  };

  void TearDown() override {
    for (int fd : open_) close(fd);
  }

  Pair Connect() {
    const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to = testing::Ipv4("127.0.0.1", listener_.port());
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    const int server = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(server, 0);
    open_.push_back(client);
    open_.push_back(server);
    return {client, server};
  }

  void Close(int fd) {
    close(fd);
    open_.erase(std::remove(open_.begin(), open_.end(), fd), open_.end());
  }

  // Whether the server shut `pair` down: its client reads the end at once.
  static bool ShutDown(const Pair& pair) {
    pollfd readable{pair.client, POLLIN, 0};
    if (poll(&readable, 1, 1000) != 1) return false;
    char byte;
    return recv(pair.client, &byte, 1, MSG_DONTWAIT) == 0;
  }

  testing::LoopbackListener listener_;
  std::vector<int> open_;
};

TEST_F(SilentConnectionsTest, TheOldestSilentAreShutPastTheGraceAndOneThatSpokeNever) {
  SilentConnections silent(seconds(1));
  const auto start = SilentConnections::Clock::now();
  const Pair oldest = Connect(), spoke = Connect(), trickled = Connect(), newest = Connect();
  silent.Track(oldest.server, start);
  silent.Track(spoke.server, start + seconds(1));
  silent.Track(trickled.server, start + seconds(1));
  silent.Track(newest.server, start + seconds(2));
  // HTTP/2's preface is a client's opening; a few bytes of it, trickled, are not.
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  ASSERT_EQ(preface.size(), SilentConnections::kOpeningBytes);
  ASSERT_EQ(send(spoke.client, preface.data(), preface.size(), 0), static_cast<ssize_t>(preface.size()));
  ASSERT_EQ(send(trickled.client, "PRI", 3, 0), 3);
  for (const Pair& pair : {spoke, trickled}) {
    pollfd arrived{pair.server, POLLIN, 0};
    ASSERT_EQ(poll(&arrived, 1, 1000), 1);
  }

  EXPECT_EQ(silent.ShutOldestSilent(start + std::chrono::milliseconds(500), 8), 0u);  // within the grace
  EXPECT_EQ(silent.ShutOldestSilent(start + seconds(3), 1), 1u);
  EXPECT_TRUE(ShutDown(oldest));
  // The one that spoke is passed over and forgotten; the trickling one and the newest go next.
  EXPECT_EQ(silent.ShutOldestSilent(start + seconds(3), 8), 2u);
  EXPECT_TRUE(ShutDown(trickled));
  EXPECT_TRUE(ShutDown(newest));
  EXPECT_EQ(silent.tracked(), 0u);
  char byte;
  EXPECT_EQ(recv(spoke.client, &byte, 1, MSG_DONTWAIT), -1);  // still open, nothing to read
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(SilentConnectionsTest, AClosedConnectionsNumberTakenByANewSocketIsNotShut) {
  SilentConnections silent(seconds(1));
  const auto start = SilentConnections::Clock::now();
  const Pair first = Connect();
  silent.Track(first.server, start);
  // A new connection now has the closed one's number, as the kernel's lowest free descriptor would
  // give it: a connection never tracked, not the first one.
  const Pair second = Connect();
  ASSERT_EQ(dup2(second.server, first.server), first.server);
  Close(second.server);
  EXPECT_EQ(silent.ShutOldestSilent(start + seconds(5), 8), 0u);
  char byte;
  EXPECT_EQ(recv(second.client, &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(SilentConnectionsTest, ConnectionsThatCameAndWentAreForgottenAtTheNextSweep) {
  SilentConnections silent(seconds(1));
  const auto start = SilentConnections::Clock::now();
  for (size_t i = 0; i < SilentConnections::kSweepEvery + 10; ++i) {
    const Pair pair = Connect();
    silent.Track(pair.server, start);
    Close(pair.server);
    Close(pair.client);
  }
  // The one open at the sweep, and the 10 tracked since.
  EXPECT_LE(silent.tracked(), 11u);
}

}  // namespace
}  // namespace graphserve
