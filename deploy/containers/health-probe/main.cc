// llamafleet-health-probe: one grpc.health.v1.Health/Check call against the coordinator,
// for container HEALTHCHECKs, Kubernetes exec probes (the kubelet's own gRPC probe cannot
// speak TLS) and scripts. Exit 0 when the server answers SERVING, 1 when it answers
// anything else or cannot be reached in time, 2 for bad flags.
//
//   llamafleet-health-probe --address 127.0.0.1:50051 [--tls-ca ca.pem [--server-name N]]
//                           [--service NAME] [--timeout 3]
//
// LLAMAFLEET_HEALTH_ADDRESS and LLAMAFLEET_TLS_CA stand in for --address and --tls-ca, so
// an image's HEALTHCHECK follows the container's configuration.
//
// The messages are tiny and fixed, so they are written and read by hand instead of
// pulling in generated health stubs: HealthCheckRequest{service = 1: string},
// HealthCheckResponse{status = 1: enum, SERVING = 1}.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace {

// Protobuf wire encoding of HealthCheckRequest: field 1 (length-delimited) when set.
std::string EncodeRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;
  out.push_back(0x0a);
  size_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

// HealthCheckResponse.status (field 1, varint), or -1 when absent or malformed. Unknown
// fields are skipped so that a newer server's response still parses.
int DecodeStatus(const std::string& bytes) {
  int status = 0;  // proto3 default: UNKNOWN
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; i < bytes.size() && shift < 64; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(bytes[i++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (i < bytes.size()) {
    uint64_t key = 0, v = 0;
    if (!varint(&key)) return -1;
    switch (key & 7) {
      case 0:
        if (!varint(&v)) return -1;
        if ((key >> 3) == 1) status = static_cast<int>(v);
        break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!varint(&v) || v > bytes.size() - i) return -1;
        i += v;
        break;
      default: return -1;
    }
  }
  return i == bytes.size() ? status : -1;
}

const char* StatusName(int s) {
  switch (s) {
    case 0: return "UNKNOWN";
    case 1: return "SERVING";
    case 2: return "NOT_SERVING";
    case 3: return "SERVICE_UNKNOWN";
    default: return "malformed response";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:50051";
  std::string tls_ca;
  std::string server_name;
  std::string service;
  double timeout_s = 3;
  bool quiet = false;
  CLI::App app{"llamafleet-health-probe: grpc.health.v1 check, exit 0 when SERVING"};
  app.add_option("--address", address, "HOST:PORT of the gRPC server")
      ->envname("LLAMAFLEET_HEALTH_ADDRESS");
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate: connect with TLS")
      ->envname("LLAMAFLEET_TLS_CA")
      ->check(CLI::ExistingFile);
  app.add_option("--server-name", server_name, "TLS name to expect (default: HOST of --address)");
  app.add_option("--service", service, "service name to ask about (default: the whole server)");
  app.add_option("--timeout", timeout_s, "seconds before giving up")->check(CLI::PositiveNumber);
  app.add_flag("-q,--quiet", quiet, "print nothing on success");
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!tls_ca.empty()) {
    std::ifstream in(tls_ca, std::ios::binary);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (ssl.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      std::cerr << "llamafleet-health-probe: --tls-ca " << tls_ca << ": no PEM certificate in it\n";
      return 2;
    }
    creds = grpc::SslCredentials(ssl);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, creds, args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  ctx.set_wait_for_ready(true);  // retry connecting until the deadline, not fail at once

  const std::string request = EncodeRequest(service);
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_buffer,
                 &response_buffer, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    std::cerr << "llamafleet-health-probe: " << address << ": " << status.error_message() << " (code "
              << status.error_code() << ")\n";
    return 1;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response_buffer.Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  const int serving = DecodeStatus(bytes);
  if (serving != 1) {
    std::cerr << "llamafleet-health-probe: " << address << ": " << StatusName(serving) << "\n";
    return 1;
  }
  if (!quiet) std::cout << "SERVING\n";
  return 0;
}
