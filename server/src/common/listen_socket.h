#pragma once
// The listening TCP sockets of graphserve's HTTP ports, from the "HOST:PORT" their flags take.
#include <sys/socket.h>

#include <string>

namespace graphserve {

// A listening, close-on-exec socket on `address` ("HOST:PORT", HOST an IPv4 or IPv6 address or a
// name, "[::]" bracketed, empty HOST every interface; port 0 picks a free one), non-blocking when
// asked; -1 with `error` set when it cannot listen there.
int ListenOn(const std::string& address, int backlog, bool non_blocking, std::string* error);
// The port `fd` is bound to; 0 when it cannot be read.
int BoundPort(int fd);
// A peer's IP address as text ("127.0.0.1", "::1"); "?" for a family other than IPv4 and IPv6.
std::string AddressText(const sockaddr* address);

}  // namespace graphserve
