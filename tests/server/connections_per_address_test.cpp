// ConnectionsPerAddress over real loopback connections: an address is refused past its cap, another
// address is not, and a connection whose descriptor was closed (or whose number a new socket took)
// leaves its address's count without being told.
#include "common/connections_per_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "loopback_listener.h"

namespace graphserve {
namespace {

using testing::Ipv4;

class ConnectionsPerAddressTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int fd : open_) close(fd);
  }

  // The server's end of a new connection from `source`: a descriptor as accept() returns it.
  int Connect(const char* source) {
    const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from = Ipv4(source, 0);
    sockaddr_in to = Ipv4("127.0.0.1", listener_.port());
    EXPECT_EQ(bind(client, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0) << source;
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    const int server = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(server, 0);
    open_.push_back(client);
    open_.push_back(server);
    return server;
  }

  void CloseAll() {
    for (int fd : open_) close(fd);
    open_.clear();
  }

  void Close(int fd) {
    close(fd);
    open_.erase(std::remove(open_.begin(), open_.end(), fd), open_.end());
  }

  testing::LoopbackListener listener_;
  std::vector<int> open_;
};

TEST_F(ConnectionsPerAddressTest, AnAddressPastItsCapIsRefusedAndAnotherIsNot) {
  ConnectionsPerAddress counter(3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2")) << i;
  EXPECT_FALSE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2"));
  EXPECT_TRUE(counter.Admit(Connect("127.0.0.3"), "127.0.0.3"));
  EXPECT_EQ(counter.Open("127.0.0.2"), 3u);
  EXPECT_EQ(counter.Open("127.0.0.3"), 1u);
}

TEST_F(ConnectionsPerAddressTest, AClosedConnectionLeavesItsAddressCountEvenWhenANewSocketTakesItsNumber) {
  ConnectionsPerAddress counter(2);
  const int first = Connect("127.0.0.2");
  ASSERT_TRUE(counter.Admit(first, "127.0.0.2"));
  ASSERT_TRUE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2"));
  Close(first);
  EXPECT_EQ(counter.Open("127.0.0.2"), 1u);
  // A connection from another address now has the closed one's number, as the kernel's lowest free
  // descriptor would give it: it is that address's, not a survivor of the first.
  const int other = Connect("127.0.0.3");
  ASSERT_EQ(dup2(other, first), first);
  open_.push_back(first);
  Close(other);
  EXPECT_TRUE(counter.Admit(first, "127.0.0.3"));
  EXPECT_EQ(counter.Open("127.0.0.2"), 1u);
  EXPECT_TRUE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2"));
  EXPECT_FALSE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2"));
}

TEST_F(ConnectionsPerAddressTest, AddressesThatLeftAreForgottenAtTheNextSweep) {
  ConnectionsPerAddress counter(1);
  for (size_t i = 0; i < ConnectionsPerAddress::kSweepEvery; ++i) {
    const std::string address = "10.0.0." + std::to_string(i);  // names only: one socket serves all
    ASSERT_TRUE(counter.Admit(Connect("127.0.0.2"), address));
    CloseAll();
  }
  // Every address but the last had left when the last admission swept them.
  EXPECT_EQ(counter.addresses(), 1u);
}

TEST_F(ConnectionsPerAddressTest, NoCapAdmitsEveryConnectionAndKeepsNothing) {
  ConnectionsPerAddress counter(0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(counter.Admit(Connect("127.0.0.2"), "127.0.0.2"));
  EXPECT_EQ(counter.addresses(), 0u);
}

}  // namespace
}  // namespace graphserve
