#ifndef LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_
#define LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_

// The HTTP server's connection accounting: how many connections it holds in all and from
// each peer address, so one client (half-sent requests, a slowloris) cannot hold every
// connection the server allows. Admit() at accept, Release() with the same peer when the
// connection ends. Thread-safe.

#include <map>
#include <mutex>
#include <string>

namespace llamafleet::http {

class ConnectionLimits {
 public:
  // max_per_peer <= 0: no per-peer cap.
  ConnectionLimits(int max_total, int max_per_peer) : max_total_(max_total), max_per_peer_(max_per_peer) {}

  enum class Admission { kAdmitted, kTooManyInAll, kTooManyFromPeer };
  // Counts the connection when admitted; counts nothing otherwise.
  Admission Admit(const std::string& peer);
  void Release(const std::string& peer);
  int total() const;

 private:
  const int max_total_;
  const int max_per_peer_;
  mutable std::mutex mu_;
  int total_ = 0;
  std::map<std::string, int> per_peer_;  // only peers with connections
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_
