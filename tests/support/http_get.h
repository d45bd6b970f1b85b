#pragma once
// A minimal HTTP/1.0 GET over a loopback TCP socket for tests: fetches graphserve's /metrics and
// Prometheus's HTTP API without a client library. The server delimits the body by closing the
// connection (HTTP/1.0), so no chunked decoding is needed. Stateless; thread-safe.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <string>

namespace graphserve::testing {

struct HttpResponse {
  int status = 0;  // 0: no answer (connection refused, timeout, malformed)
  std::string headers;
  std::string body;
};

// GET http://127.0.0.1:`port``target`; gives up after `timeout_s` seconds of silence.
inline HttpResponse HttpGet(int port, const std::string& target, int timeout_s = 10) {
  HttpResponse response;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return response;
  timeval timeout{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  std::string raw;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buffer[16384];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) raw.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) return response;
  response.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  response.headers = raw.substr(0, header_end);
  response.body = raw.substr(header_end + 4);
  return response;
}

// Percent-encodes a query parameter value.
inline std::string UrlEncode(const std::string& text) {
  std::string encoded;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      encoded += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      encoded += hex;
    }
  }
  return encoded;
}

}  // namespace graphserve::testing
