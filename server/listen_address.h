#ifndef LLAMAFLEET_SERVER_LISTEN_ADDRESS_H_
#define LLAMAFLEET_SERVER_LISTEN_ADDRESS_H_

// Whether the coordinator can listen where it was told to, asked before anything starts,
// so that a port another process holds ends start-up with one line that says so instead
// of a listener that fails later (or, with SO_REUSEPORT, one that shares the port).

#include <string>

#include "absl/status/status.h"

namespace llamafleet {

// Binds (and releases) a TCP socket at `address`, HOST:PORT or [V6]:PORT, as a listener
// would: SO_REUSEADDR, no SO_REUSEPORT. OK when it binds, when the port is 0 (the kernel
// picks a free one) or when `address` is another form (a gRPC URI such as unix:PATH,
// left to the listener to judge). Otherwise UNAVAILABLE "`flag`: cannot listen on
// ADDRESS: <reason>" (the reason from the system: "Address already in use", "Permission
// denied", "Cannot assign requested address", or the resolver's for a host that does not
// resolve), saying for a port in use that another process holds it.
absl::Status CheckCanListen(const std::string& address, const std::string& flag);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_LISTEN_ADDRESS_H_
