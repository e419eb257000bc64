// The one-shot submit's pieces (clients/cli/oneshot.h): the HPACK decoder against the
// examples of RFC 7541 Appendix C, the hand-written protobuf wire format against the
// generated classes, and the HTTP/2 call against servers that answer correctly, with
// errors, with junk or not at all.

#include "clients/cli/oneshot.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "llamafleet/v1/job.pb.h"
#include "tests/testing/process.h"

namespace llamafleet::oneshot {
namespace {

std::vector<uint8_t> Hex(const std::string& hex) {
  std::vector<uint8_t> out;
  std::string digits;
  for (char c : hex) {
    if (c != ' ' && c != '\n') digits.push_back(c);
  }
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<HeaderField> Decode(HpackDecoder* d, const std::string& hex) {
  const std::vector<uint8_t> bytes = Hex(hex);
  std::vector<HeaderField> fields;
  EXPECT_TRUE(d->Decode(bytes.data(), bytes.size(), &fields)) << hex;
  return fields;
}

using Fields = std::vector<HeaderField>;

// ---------------------------------------------------------------------------
// HPACK: RFC 7541 Appendix C
// ---------------------------------------------------------------------------

TEST(HpackTest, IndicesAndMultiByteIntegers) {
  HpackDecoder d;
  // Indexed field 62+ is outside an empty dynamic table.
  std::vector<HeaderField> out;
  const std::vector<uint8_t> beyond = {0xbe};
  EXPECT_FALSE(d.Decode(beyond.data(), beyond.size(), &out));
  HpackDecoder d2;
  // 0x0f 0x1f: a literal without indexing whose name index uses the multi-byte form
  // (15 + 31 = 46: "location"), value "x".
  EXPECT_EQ(Decode(&d2, "0f1f 0178"), (Fields{{"location", "x"}}));
}

TEST(HpackTest, RequestsWithoutHuffmanC3) {
  HpackDecoder d;
  EXPECT_EQ(Decode(&d, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
            (Fields{{":method", "GET"}, {":scheme", "http"}, {":path", "/"},
                    {":authority", "www.example.com"}}));
  EXPECT_EQ(d.table_size(), 57u);
  EXPECT_EQ(Decode(&d, "8286 84be 5808 6e6f 2d63 6163 6865"),
            (Fields{{":method", "GET"}, {":scheme", "http"}, {":path", "/"},
                    {":authority", "www.example.com"}, {"cache-control", "no-cache"}}));
  EXPECT_EQ(d.table_size(), 110u);
  EXPECT_EQ(Decode(&d, "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
            (Fields{{":method", "GET"}, {":scheme", "https"}, {":path", "/index.html"},
                    {":authority", "www.example.com"}, {"custom-key", "custom-value"}}));
  EXPECT_EQ(d.table_size(), 164u);
  EXPECT_EQ(d.dynamic_table(), (std::deque<HeaderField>{{"custom-key", "custom-value"},
                                                        {"cache-control", "no-cache"},
                                                        {":authority", "www.example.com"}}));
}

TEST(HpackTest, RequestsWithHuffmanC4) {
  HpackDecoder d;
  EXPECT_EQ(Decode(&d, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
            (Fields{{":method", "GET"}, {":scheme", "http"}, {":path", "/"},
                    {":authority", "www.example.com"}}));
  EXPECT_EQ(d.table_size(), 57u);
  EXPECT_EQ(Decode(&d, "8286 84be 5886 a8eb 1064 9cbf"),
            (Fields{{":method", "GET"}, {":scheme", "http"}, {":path", "/"},
                    {":authority", "www.example.com"}, {"cache-control", "no-cache"}}));
  EXPECT_EQ(d.table_size(), 110u);
  EXPECT_EQ(Decode(&d, "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
            (Fields{{":method", "GET"}, {":scheme", "https"}, {":path", "/index.html"},
                    {":authority", "www.example.com"}, {"custom-key", "custom-value"}}));
  EXPECT_EQ(d.table_size(), 164u);
}

const Fields kResponse1 = {{":status", "302"},
                           {"cache-control", "private"},
                           {"date", "Mon, 21 Oct 2013 20:13:21 GMT"},
                           {"location", "https://www.example.com"}};
const Fields kResponse2 = {{":status", "307"},
                           {"cache-control", "private"},
                           {"date", "Mon, 21 Oct 2013 20:13:21 GMT"},
                           {"location", "https://www.example.com"}};
const Fields kResponse3 = {
    {":status", "200"},
    {"cache-control", "private"},
    {"date", "Mon, 21 Oct 2013 20:13:22 GMT"},
    {"location", "https://www.example.com"},
    {"content-encoding", "gzip"},
    {"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}};
const std::deque<HeaderField> kTableAfter3 = {
    {"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"},
    {"content-encoding", "gzip"},
    {"date", "Mon, 21 Oct 2013 20:13:22 GMT"}};

// The server's table is 256 bytes: entries are evicted as new ones come.
TEST(HpackTest, ResponsesWithoutHuffmanC5) {
  HpackDecoder d(4096);
  // The decoder learns the 256-byte limit from a size update, as a real encoder sends it.
  Decode(&d, "3fe1 01");  // size update to 256 (5-bit prefix: 31 + 225)
  EXPECT_EQ(Decode(&d,
                   "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 "
                   "3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 "
                   "7861 6d70 6c65 2e63 6f6d"),
            kResponse1);
  EXPECT_EQ(d.table_size(), 222u);
  EXPECT_EQ(Decode(&d, "4803 3330 37c1 c0bf"), kResponse2);
  EXPECT_EQ(d.table_size(), 222u);
  EXPECT_EQ(d.dynamic_table().front(), (HeaderField{":status", "307"}));
  EXPECT_EQ(Decode(&d,
                   "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 "
                   "474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 "
                   "454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 "
                   "6572 7369 6f6e 3d31"),
            kResponse3);
  EXPECT_EQ(d.table_size(), 215u);
  EXPECT_EQ(d.dynamic_table(), kTableAfter3);
}

TEST(HpackTest, ResponsesWithHuffmanC6) {
  HpackDecoder d(4096);
  Decode(&d, "3fe1 01");
  EXPECT_EQ(Decode(&d,
                   "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 "
                   "82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"),
            kResponse1);
  EXPECT_EQ(d.table_size(), 222u);
  EXPECT_EQ(Decode(&d, "4883 640e ffc1 c0bf"), kResponse2);
  EXPECT_EQ(d.table_size(), 222u);
  EXPECT_EQ(Decode(&d,
                   "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b "
                   "d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 "
                   "0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07"),
            kResponse3);
  EXPECT_EQ(d.table_size(), 215u);
  EXPECT_EQ(d.dynamic_table(), kTableAfter3);
}

TEST(HpackTest, SizeUpdatesAndMalformedBlocks) {
  HpackDecoder d(4096);
  Decode(&d, "400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
  EXPECT_EQ(d.table_size(), 54u);  // 10 + 12 + 32
  Decode(&d, "20");  // size 0 empties the table
  EXPECT_EQ(d.table_size(), 0u);
  EXPECT_TRUE(d.dynamic_table().empty());
  auto fails = [](const std::string& hex) {
    HpackDecoder fresh(4096);
    const std::vector<uint8_t> bytes = Hex(hex);
    std::vector<HeaderField> out;
    return !fresh.Decode(bytes.data(), bytes.size(), &out);
  };
  EXPECT_TRUE(fails("80"));                // index 0
  EXPECT_TRUE(fails("3fe2 1f"));           // a size update above SETTINGS_HEADER_TABLE_SIZE
  EXPECT_TRUE(fails("82 20"));             // a size update after a field
  EXPECT_TRUE(fails("410f 7777"));         // a string longer than the block
  EXPECT_TRUE(fails("ffff ffff ffff ff"));  // an integer that never ends
  EXPECT_TRUE(fails("0081 ff"));           // Huffman: 8 bits of padding
  EXPECT_TRUE(fails("0084 ffff ffff 00"));  // Huffman: the EOS symbol
  EXPECT_TRUE(fails("0081 fe"));           // Huffman: a code cut short
  EXPECT_TRUE(fails("0081 18"));           // Huffman: 'a' and padding that is not all ones
  // A header list larger than the caller allows.
  HpackDecoder small(4096);
  const std::vector<uint8_t> big = Hex("0003 616263 0378 7978");
  std::vector<HeaderField> out;
  EXPECT_FALSE(small.Decode(big.data(), big.size(), &out, 10));
}

TEST(HpackTest, HuffmanCodesRebuiltFromTheLengths) {
  // The canonical code rebuilt from the lengths gives the RFC's codes (two of them here;
  // C.4 and C.6 use many more).
  // 'a' is 00011 (5 bits), '0' is 00000 (5 bits): "a0" = 00011000 00 + padding 111111.
  std::string out;
  const std::vector<uint8_t> a0 = Hex("18 3f");
  ASSERT_TRUE(HuffmanDecode(a0.data(), a0.size(), &out));
  EXPECT_EQ(out, "a0");
  // Byte 0 is the 13-bit code 1111111111000: "\0" = 11111111 11000 + 111 padding.
  out.clear();
  const std::vector<uint8_t> zero = Hex("ff c7");
  ASSERT_TRUE(HuffmanDecode(zero.data(), zero.size(), &out));
  EXPECT_EQ(out, std::string(1, '\0'));
}

// ---------------------------------------------------------------------------
// Protobuf wire format against the generated classes
// ---------------------------------------------------------------------------

TEST(ProtoTest, RequestParsesWithTheGeneratedClass) {
  for (const std::string& text : {std::string("name: a\n"), std::string(100000, 'y'), std::string()}) {
    v1::SubmitJobFileRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(EncodeSubmitJobFileRequest(text, true, "my-key")));
    EXPECT_EQ(parsed.text(), text);
    EXPECT_TRUE(parsed.dry_run());
    EXPECT_EQ(parsed.idempotency_key(), "my-key");
  }
  v1::SubmitJobFileRequest plain;
  ASSERT_TRUE(plain.ParseFromString(EncodeSubmitJobFileRequest("t", false, "")));
  EXPECT_FALSE(plain.dry_run());
  EXPECT_EQ(plain.idempotency_key(), "");
  EXPECT_EQ(plain.SerializeAsString(), EncodeSubmitJobFileRequest("t", false, ""));
}

v1::SubmitJobsResponse SampleResponse() {
  v1::SubmitJobsResponse response;
  for (int i = 0; i < 3; ++i) {
    v1::SubmitJobResponse* r = response.add_jobs();
    v1::Job* job = r->mutable_job();
    job->set_id(std::to_string(1000000 + i));
    job->set_idempotency_key("auto-0123456789abcdef-" + std::to_string(i));
    job->set_owner("alice");
    job->set_state(v1::QUEUED);
    job->mutable_spec()->set_name("job-" + std::to_string(i));
    job->mutable_spec()->set_priority(-5);  // a negative varint: 10 bytes
    job->mutable_spec()->mutable_training()->set_max_steps(1u << 20);
    job->mutable_spec()->mutable_training()->set_lr(3e-4);  // a double: fixed64
    job->mutable_spec()->mutable_training()->add_betas(0.9);  // packed doubles
    job->mutable_create_time()->set_seconds(1700000000);
    r->set_created(i != 1);
  }
  return response;
}

TEST(ProtoTest, ResponseDecodesLikeTheGeneratedClass) {
  const v1::SubmitJobsResponse response = SampleResponse();
  const std::string bytes = response.SerializeAsString();
  std::vector<SubmittedJob> jobs;
  ASSERT_TRUE(DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &jobs));
  ASSERT_EQ(jobs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(jobs[i].id, response.jobs(i).job().id());
    EXPECT_EQ(jobs[i].idempotency_key, response.jobs(i).job().idempotency_key());
    EXPECT_EQ(jobs[i].created, response.jobs(i).created());
  }
}

TEST(ProtoTest, UnknownFieldsOfEveryWireTypeAreSkipped) {
  v1::SubmitJobsResponse response = SampleResponse();
  auto add_unknown = [](google::protobuf::Message* m) {
    google::protobuf::UnknownFieldSet* u = m->GetReflection()->MutableUnknownFields(m);
    u->AddVarint(1000, 12345678901ull);
    u->AddFixed32(1001, 7);
    u->AddFixed64(1002, 9);
    u->AddLengthDelimited(1003, "opaque");
    google::protobuf::UnknownFieldSet* group = u->AddGroup(1004);
    group->AddVarint(1, 2);
    group->AddGroup(2)->AddFixed32(3, 4);
  };
  add_unknown(&response);
  add_unknown(response.mutable_jobs(0));
  add_unknown(response.mutable_jobs(0)->mutable_job());
  // A known field number with another wire type is an unknown field to protobuf too.
  response.mutable_jobs(1)->mutable_job()->GetReflection()
      ->MutableUnknownFields(response.mutable_jobs(1)->mutable_job())->AddVarint(1, 77);
  const std::string bytes = response.SerializeAsString();
  v1::SubmitJobsResponse reparsed;
  ASSERT_TRUE(reparsed.ParseFromString(bytes));
  std::vector<SubmittedJob> jobs;
  ASSERT_TRUE(DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &jobs));
  ASSERT_EQ(jobs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(jobs[i].id, reparsed.jobs(i).job().id());
    EXPECT_EQ(jobs[i].idempotency_key, reparsed.jobs(i).job().idempotency_key());
    EXPECT_EQ(jobs[i].created, reparsed.jobs(i).created());
  }
}

TEST(ProtoTest, MalformedInputIsRefusedWithoutCrashing) {
  const std::string bytes = SampleResponse().SerializeAsString();
  // Every truncation that cuts a field short fails; none crashes.
  int refused = 0;
  for (size_t n = 1; n < bytes.size(); ++n) {
    std::vector<SubmittedJob> jobs;
    if (!DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(bytes.data()), n, &jobs)) ++refused;
  }
  EXPECT_GT(refused, 0);
  for (const std::string& bad : {std::string("\x0a\x05\x0a", 3), std::string("\x00", 1),
                                 std::string("\x0e", 1), std::string("\x0f", 1),
                                 std::string("\x0c", 1), std::string("\x0b\x0a\x01", 3),
                                 std::string(11, '\xff')}) {
    std::vector<SubmittedJob> jobs;
    EXPECT_FALSE(DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), &jobs))
        << ::testing::PrintToString(bad);
  }
  std::mt19937 rng(13);
  for (int i = 0; i < 20000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    std::vector<SubmittedJob> jobs;
    (void)DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(junk.data()), junk.size(), &jobs);
    std::vector<HeaderField> fields;
    HpackDecoder d;
    (void)d.Decode(reinterpret_cast<const uint8_t*>(junk.data()), junk.size(), &fields);
  }
}

// ---------------------------------------------------------------------------
// The call, against scripted servers
// ---------------------------------------------------------------------------

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  f.push_back(static_cast<char>(stream >> 24));
  f.push_back(static_cast<char>(stream >> 16));
  f.push_back(static_cast<char>(stream >> 8));
  f.push_back(static_cast<char>(stream));
  return f + payload;
}

std::string Literal(const std::string& name, const std::string& value) {
  return std::string(1, '\0') + static_cast<char>(name.size()) + name + static_cast<char>(value.size()) + value;
}

// Accepts one connection, reads what the client sends for a moment, answers `script`
// and keeps the connection open until the client closes it (or `hold` ends).
class ScriptedServer {
 public:
  // `repeat`: send `script` again and again until the client goes away. `piece`: send
  // the answer in writes of that many bytes, pausing now and then, so that frames arrive
  // split across the client's reads (0: in one write).
  explicit ScriptedServer(std::string script, bool answer = true, bool repeat = false,
                          size_t piece = 0)
      : script_(std::move(script)) {
    fd_ = ::llamafleet::testing::ListenOnLoopback(&port_);
    EXPECT_GE(fd_, 0);
    thread_ = std::thread([this, answer, repeat, piece] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[65536];
      pollfd p{c, POLLIN, 0};
      // What the client sends first (preface, SETTINGS, HEADERS, DATA).
      while (poll(&p, 1, 200) > 0) {
        const ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        received_.append(buf, static_cast<size_t>(n));
        if (received_.size() > 24 && answer) break;
      }
      if (answer && piece == 0) (void)send(c, script_.data(), script_.size(), MSG_NOSIGNAL);
      for (size_t at = 0, n = 0; answer && piece > 0 && at < script_.size(); at += piece, ++n) {
        if (send(c, script_.data() + at, std::min(piece, script_.size() - at), MSG_NOSIGNAL) <= 0) break;
        if (n % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      while (repeat && send(c, script_.data(), script_.size(), MSG_NOSIGNAL) > 0) {
        while (recv(c, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        }
      }
      while (poll(&p, 1, 3000) > 0) {
        const ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        received_.append(buf, static_cast<size_t>(n));
      }
      close(c);
    });
  }
  ~ScriptedServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  const std::string& received() const { return received_; }

 private:
  std::string script_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string received_;
};

CallResult Call(int port, int64_t timeout_ms = 3000) {
  CallOptions options;
  options.host = "127.0.0.1";
  options.port = std::to_string(port);
  options.authority = "127.0.0.1:" + options.port;
  options.metadata = {{"x-llamafleet-user", "alice"}};
  options.timeout_ms = timeout_ms;
  return UnaryCall(options, "/llamafleet.v1.JobService/SubmitJobFile",
                   EncodeSubmitJobFileRequest("name: a\n", false, ""));
}

std::string GrpcMessage(const std::string& message) {
  std::string out(1, '\0');
  const uint32_t n = static_cast<uint32_t>(message.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(n >> shift));
  return out + message;
}

TEST(UnaryCallTest, ReadsAResponseWithTrailers) {
  const std::string message = SampleResponse().SerializeAsString();
  const std::string script =
      Frame(4, 0, 0, "") + Frame(6, 0, 0, "12345678") +  // SETTINGS, PING
      Frame(1, 0x4, 1, "\x88" + Literal("content-type", "application/grpc")) +
      Frame(0, 0, 1, GrpcMessage(message)) +
      // Trailers as a literal with incremental indexing.
      Frame(1, 0x5, 1, std::string("\x40\x0bgrpc-status\x01" "0", 15));
  ScriptedServer server(script);
  const CallResult r = Call(server.port());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.grpc_status, 0);
  EXPECT_EQ(r.message, message);
  // What we sent: the preface, our SETTINGS, a HEADERS frame naming the method.
  EXPECT_EQ(server.received().compare(0, 24, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0);
  EXPECT_NE(server.received().find("/llamafleet.v1.JobService/SubmitJobFile"), std::string::npos);
  EXPECT_NE(server.received().find("alice"), std::string::npos);
}

TEST(UnaryCallTest, ReadsAResponseLargerThanOneReceiveArrivingInPieces) {
  // 200 KB in DATA frames of 16 KiB, sent 1,000 bytes at a time: frame headers and
  // payloads straddle reads, and the client's 64 KiB receive buffer is refilled many
  // times (it is reused, never zero-filled: only what recv() wrote may be read back).
  std::string message(200 * 1000, '\0');
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<char>('a' + i * 7 % 26);
  const std::string grpc = GrpcMessage(message);
  std::string script = Frame(4, 0, 0, "") + Frame(1, 0x4, 1, "\x88" + Literal("content-type", "application/grpc"));
  for (size_t at = 0; at < grpc.size(); at += 16384) {
    script += Frame(0, 0, 1, grpc.substr(at, 16384));
  }
  script += Frame(1, 0x5, 1, std::string("\x40\x0bgrpc-status\x01" "0", 15));
  ScriptedServer server(script, /*answer=*/true, /*repeat=*/false, /*piece=*/1000);
  const CallResult r = Call(server.port());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.grpc_status, 0);
  EXPECT_TRUE(r.message == message) << "message of " << r.message.size() << " bytes differs";
}

TEST(UnaryCallTest, ReadsATrailersOnlyError) {
  const std::string script =
      Frame(4, 0, 0, "") +
      Frame(1, 0x5, 1,
            "\x88" + Literal("content-type", "application/grpc") + Literal("grpc-status", "3") +
                Literal("grpc-message", "spec.name: bad%20name%0A%E2%9C%93"));
  ScriptedServer server(script);
  const CallResult r = Call(server.port());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.grpc_status, 3);
  EXPECT_EQ(r.grpc_message, "spec.name: bad name\n\xE2\x9C\x93");
}

TEST(UnaryCallTest, JunkAndBrokenProtocolFail) {
  const std::string ok_headers = Frame(1, 0x4, 1, "\x88" + Literal("content-type", "application/grpc"));
  const std::vector<std::pair<std::string, std::string>> scripts = {
      {"HTTP/1.1", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"},
      {"huge frame", std::string("\xff\xff\xff\x00\x00\x00\x00\x00\x00", 9)},
      {"bad HPACK", Frame(4, 0, 0, "") + Frame(1, 0x4, 1, "\x80")},
      {"GOAWAY", Frame(4, 0, 0, "") + Frame(7, 0, 0, std::string(8, '\0'))},
      {"RST_STREAM", Frame(4, 0, 0, "") + Frame(3, 0, 1, std::string(4, '\0'))},
      {"HEADERS on stream 3", Frame(1, 0x5, 3, "\x88")},
      {"DATA first", Frame(0, 0, 1, GrpcMessage("x"))},
      {"not 200", Frame(1, 0x5, 1, "\x8d" + Literal("content-type", "application/grpc") +
                                        Literal("grpc-status", "0"))},
      {"no grpc-status", Frame(1, 0x5, 1, "\x88" + Literal("content-type", "application/grpc"))},
      {"bad framing", ok_headers + Frame(0, 0, 1, std::string("\x01\x00\x00\x00\x01x", 6)) +
                          Frame(1, 0x5, 1, Literal("grpc-status", "0"))},
      {"short message", ok_headers + Frame(0, 0, 1, std::string("\x00\x00\x00\x00\x09x", 6)) +
                            Frame(1, 0x5, 1, Literal("grpc-status", "0"))},
      {"closed mid-stream", ok_headers + Frame(0, 0, 1, GrpcMessage("x"))},
      {"bad SETTINGS", Frame(4, 0, 0, "abcde")},
      {"window overflow", Frame(8, 0, 0, "\x7f\xff\xff\xff")},
      {"padding overrun", Frame(1, 0xd, 1, "\x40\x88")},
  };
  for (const auto& [name, script] : scripts) {
    auto server = std::make_unique<ScriptedServer>(script);
    const int port = server->port();
    const CallResult r = Call(port, 1500);
    EXPECT_FALSE(r.ok) << name;
  }
}

TEST(UnaryCallTest, SilentServerTimesOutAndRefusedPortFails) {
  {
    ScriptedServer server("", /*answer=*/false);
    const auto start = std::chrono::steady_clock::now();
    const CallResult r = Call(server.port(), 300);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, "deadline exceeded");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  {
    // A server that never stops talking (PING after PING) still meets the deadline.
    std::string pings;
    for (int i = 0; i < 1000; ++i) pings += Frame(6, 0, 0, "12345678");
    ScriptedServer server(pings, /*answer=*/true, /*repeat=*/true);
    const auto start = std::chrono::steady_clock::now();
    const CallResult r = Call(server.port(), 300);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, "deadline exceeded");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  int port = 0;
  {
    ScriptedServer closed("");  // bound, then closed: nothing listens there afterwards
    port = closed.port();
  }
  const CallResult r = Call(port, 1000);
  EXPECT_FALSE(r.ok);
}

TEST(UnaryCallTest, GrpcTimeoutAndPercentDecoding) {
  EXPECT_EQ(GrpcTimeout(30000), "30000m");
  EXPECT_EQ(GrpcTimeout(0), "1m");
  EXPECT_EQ(GrpcTimeout(100000000), "100000S");
  EXPECT_EQ(PercentDecode("a%2"), "a%2");
  EXPECT_EQ(PercentDecode("%zz%41"), "%zzA");
}

}  // namespace
}  // namespace llamafleet::oneshot
