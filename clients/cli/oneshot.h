// One gRPC unary call over cleartext HTTP/2, with no gRPC, protobuf or absl runtime:
// what the small `llamafleet` front binary needs to submit a job file in one round trip
// (SubmitJobFile) without paying the full CLI's start-up (issue 13). Plain C++17 and
// POSIX sockets.
//
// Everything the server sends is treated as hostile: every length is checked, every
// header block is decoded with a complete HPACK decoder (RFC 7541: static and dynamic
// tables, size updates, Huffman), and anything unexpected makes the call fail. The
// caller then falls back to the full CLI, so a failure here never decides what the user
// sees.
#ifndef LLAMAFLEET_CLIENTS_CLI_ONESHOT_H_
#define LLAMAFLEET_CLIENTS_CLI_ONESHOT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace llamafleet::oneshot {

// ---------------------------------------------------------------------------
// HPACK (RFC 7541), decoding only
// ---------------------------------------------------------------------------

struct HeaderField {
  std::string name;
  std::string value;
  bool operator==(const HeaderField& o) const { return name == o.name && value == o.value; }
};

// Decodes Huffman-coded `data` (RFC 7541 5.2, Appendix B) into `out`. False on an EOS
// symbol in the string, padding longer than 7 bits or padding that is not all ones.
bool HuffmanDecode(const uint8_t* data, size_t size, std::string* out);

class HpackDecoder {
 public:
  // `max_table_size`: the SETTINGS_HEADER_TABLE_SIZE we advertised (4096 by default);
  // a size update above it is an error.
  explicit HpackDecoder(size_t max_table_size = 4096)
      : settings_max_(max_table_size), max_size_(max_table_size) {}

  // Decodes one complete header block, appending its fields to `out`. False on any
  // malformed input; the decoder (the connection's compression state) is then unusable.
  // `max_list_size` bounds the decoded fields (name + value + 32 each, like
  // SETTINGS_MAX_HEADER_LIST_SIZE).
  bool Decode(const uint8_t* data, size_t size, std::vector<HeaderField>* out,
              size_t max_list_size = 1 << 20);

  // The dynamic table, newest first, and its size in RFC 7541 terms.
  const std::deque<HeaderField>& dynamic_table() const { return table_; }
  size_t table_size() const { return size_; }

 private:
  bool Lookup(uint64_t index, HeaderField* field) const;
  void Add(HeaderField field);
  void Evict(size_t limit);

  const size_t settings_max_;
  size_t max_size_;
  size_t size_ = 0;
  std::deque<HeaderField> table_;
};

// ---------------------------------------------------------------------------
// The two messages, in protobuf wire format (api/llamafleet/v1/job.proto)
// ---------------------------------------------------------------------------

// SubmitJobFileRequest {text = 1, dry_run = 2, idempotency_key = 3}.
std::string EncodeSubmitJobFileRequest(const std::string& text, bool dry_run,
                                       const std::string& idempotency_key);

// What the CLI prints of each SubmitJobResponse.
struct SubmittedJob {
  std::string id;               // Job.id (1)
  std::string idempotency_key;  // Job.idempotency_key (8)
  bool created = false;         // SubmitJobResponse.created (2)
};

// SubmitJobsResponse {repeated SubmitJobResponse jobs = 1}; unknown fields of every wire
// type are skipped, as protobuf does. False on malformed input.
bool DecodeSubmitJobsResponse(const uint8_t* data, size_t size, std::vector<SubmittedJob>* jobs);

// ---------------------------------------------------------------------------
// The call
// ---------------------------------------------------------------------------

struct CallOptions {
  std::string host;  // a name or a literal address (IPv6 without brackets)
  std::string port;
  std::string authority;  // HOST:PORT as the user wrote it
  // Sent as given; names in lower case, values printable ASCII.
  std::vector<std::pair<std::string, std::string>> metadata;
  int64_t timeout_ms = 30000;
};

struct CallResult {
  // False: no answer we could trust (could not connect, protocol error, timeout, a reset
  // or GOAWAY). grpc_status and message are then meaningless.
  bool ok = false;
  std::string error;  // why not ok, for tests and debugging
  int grpc_status = -1;
  std::string grpc_message;  // percent-decoded
  std::string message;       // the response message, without the 5-byte gRPC prefix
};

// Calls `path` (/package.Service/Method) with `request` (a serialized message).
CallResult UnaryCall(const CallOptions& options, const std::string& path,
                     const std::string& request);

// grpc-message is percent-encoded (gRPC over HTTP/2): "%XX" becomes the byte; anything
// malformed stays as is.
std::string PercentDecode(const std::string& text);

// The grpc-timeout value for `ms` (at most 8 digits and a unit).
std::string GrpcTimeout(int64_t ms);

}  // namespace llamafleet::oneshot

#endif  // LLAMAFLEET_CLIENTS_CLI_ONESHOT_H_
