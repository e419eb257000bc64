#include "server/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace llamafleet {

absl::Status CheckCanListen(const std::string& address, const std::string& flag) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || absl::StrContains(address, "/")) return absl::OkStatus();
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::OkStatus();  // not HOST:PORT: the listener says what it makes of it
  }
  if (port_number == 0) return absl::OkStatus();
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto refused = [&](const std::string& reason) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", address, ": ", reason));
  };
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return refused(gai_strerror(rc));
  }
  int error = 0;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) {
    error = errno;
  } else {
    const int on = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
                     sizeof(on));  // as a listener: TIME_WAIT is no clash
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  if (error == EADDRINUSE) {
    return refused(absl::StrCat(std::strerror(error),
                                " (another process, perhaps a coordinator, holds port ", port,
                                "; stop it or choose another with ", flag, ")"));
  }
  if (error != 0) return refused(std::strerror(error));
  return absl::OkStatus();
}

}  // namespace llamafleet
