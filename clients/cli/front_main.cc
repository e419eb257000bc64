// llamafleet: the command users and scripts run. A small front binary (no gRPC,
// protobuf, absl or YAML parser; libstdc++ linked in statically) that does the one
// command scripts run in loops, `llamafleet submit -f FILE`, itself: it sends the file
// as written to the coordinator's SubmitJobFile in one HTTP/2 round trip (oneshot.h),
// where the full CLI would pay ~3 ms of start-up for its 40 MB of gRPC/protobuf/absl and
// ~1.5 ms more for gRPC's channel set-up (issue 13).
//
// Everything else runs the full CLI, `llamafleet-cli` next to this binary, with the same
// arguments (execv, so its output, errors and exit codes are the user's): other commands,
// --help/--version, -o json|yaml, --dry-run, several -f, stdin, TLS, any flag or value
// this parser is not sure it reads exactly as the full CLI does, a coordinator that
// cannot be reached, any protocol surprise, and every non-OK status. Re-running a failed
// submission that way is safe: the full CLI sends each document with the same derived
// idempotency key the coordinator derived here (or the same --idempotency-key), so a job
// that did get stored is reported as already existing, never stored twice. Only the error
// path pays twice.
//
// LLAMAFLEET_ONESHOT=0 always runs the full CLI; LLAMAFLEET_ONESHOT_DEBUG=1 says on
// stderr why the one-shot path was not taken.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "clients/cli/escape.h"
#include "clients/cli/oneshot.h"

namespace {

constexpr char kFullCli[] = "llamafleet-cli";
constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";  // as clients/cli/cli.cc
constexpr char kSubmitPath[] = "/llamafleet.v1.JobService/SubmitJobFile";

[[noreturn]] void RunFullCli(char** argv, const char* why) {
  if (why != nullptr) {
    if (const char* debug = std::getenv("LLAMAFLEET_ONESHOT_DEBUG"); debug != nullptr && debug[0] == '1') {
      std::fprintf(stderr, "llamafleet: one-shot submit not used: %s\n", why);
    }
  }
  std::string path;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    path = self;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string(kFullCli) : path.substr(0, slash + 1) + kFullCli;
  } else {
    path = kFullCli;
  }
  argv[0] = const_cast<char*>(path.c_str());
  execv(path.c_str(), argv);
  std::fprintf(stderr, "llamafleet: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
  std::exit(1);
}

struct Request {
  const char* coordinator = nullptr;
  const char* user = nullptr;
  const char* token = nullptr;
  const char* timeout = nullptr;
  const char* output = nullptr;
  const char* file = nullptr;
  const char* idempotency_key = nullptr;
  bool submit = false;
};

// Reads `submit -f FILE` with the flags the full CLI accepts there, global flags before
// or after the command; false for anything else. Spellings accepted: --name VALUE,
// --name=VALUE, and for -o and -f also -xVALUE. Each flag at most once (the full CLI
// refuses repeats of single-value flags; several -f are a batch it makes itself).
bool ParseArgs(int argc, char** argv, Request* r, const char** why) {
  struct Flag {
    const char* long_name;
    char short_name;
    bool submit_only;
    const char** value;
  };
  const Flag flags[] = {
      {"--coordinator", 0, false, &r->coordinator},
      {"--output", 'o', false, &r->output},
      {"--user", 0, false, &r->user},
      {"--token", 0, false, &r->token},
      {"--timeout", 0, false, &r->timeout},
      {"--file", 'f', true, &r->file},
      {"--idempotency-key", 0, true, &r->idempotency_key},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "submit") {
      if (r->submit) return (*why = "two commands"), false;
      r->submit = true;
      continue;
    }
    const Flag* match = nullptr;
    const char* value = nullptr;
    bool inline_value = false;
    for (const Flag& f : flags) {
      const size_t len = std::strlen(f.long_name);
      if (arg == f.long_name) {
        match = &f;
      } else if (arg.compare(0, len + 1, std::string(f.long_name) + "=") == 0) {
        match = &f;
        value = argv[i] + len + 1;
        inline_value = true;
      } else if (f.short_name != 0 && arg.size() >= 2 && arg[0] == '-' && arg[1] == f.short_name) {
        match = &f;
        if (arg.size() > 2) {
          value = argv[i] + 2;
          inline_value = true;
        }
      }
      if (match != nullptr) break;
    }
    if (match == nullptr) return (*why = "an argument other than submit's flags"), false;
    if (match->submit_only && !r->submit) return (*why = "a submit flag before the command"), false;
    if (!inline_value) {
      if (i + 1 >= argc) return (*why = "a flag without its value"), false;
      value = argv[++i];
      // The full CLI may read "-x" as a flag rather than a value.
      if (value[0] == '-') return (*why = "a value that starts with '-'"), false;
    }
    if (value[0] == '\0') return (*why = "an empty value"), false;
    if (*match->value != nullptr) return (*why = "a flag given twice"), false;
    *match->value = value;
  }
  if (!r->submit) return (*why = "not a submit"), false;
  if (r->file == nullptr) return (*why = "no -f"), false;
  if (r->output != nullptr && std::strcmp(r->output, "table") != 0) return (*why = "-o other than table"), false;
  return true;
}

// The full CLI's --timeout: a number of seconds or a number with ms, s, m or h. Anything
// absl::ParseDuration reads beyond that ("1m30s", "us") goes to the full CLI.
bool ParseTimeoutMs(const char* text, int64_t* ms) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (end == text || errno != 0 || !(v > 0) || v > 1e9) return false;
  const std::string unit = end;
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60000;
  } else if (unit == "h") {
    scale = 3600000;
  } else {
    return false;
  }
  // Leading spaces, "inf", "nan", hex floats: leave them to the full CLI.
  for (const char* p = text; p != end; ++p) {
    if (!((*p >= '0' && *p <= '9') || *p == '.')) return false;
  }
  *ms = static_cast<int64_t>(v * scale + 0.999);
  return *ms > 0;
}

// HOST:PORT as the full CLI accepts it, split; IPv6 in brackets.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  if (address.compare(0, 5, "unix:") == 0 || address.find("://") != std::string::npos) return false;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *port = address.substr(colon + 1);
  if (port->size() > 5) return false;
  for (char c : *port) {
    if (c < '0' || c > '9') return false;
  }
  const int n = std::atoi(port->c_str());
  if (n < 1 || n > 65535) return false;
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
    return !host->empty();
  }
  for (char c : *host) {
    // Names and IPv4 only; anything else (a bare IPv6, spaces, '%') goes to gRPC's parser.
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-' || c == '_')) {
      return false;
    }
  }
  return true;
}

bool Printable(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// Reads the whole file at `path`, a regular file when `regular_only`. open/fstat/read
// into a string of the file's size: no FILE buffer and no large stack buffer, each of
// which costs page faults (~10 us each on the VMs issue 13 is measured on) and syscalls.
bool ReadFile(const char* path, std::string* text, bool regular_only = false) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st = {};
  bool ok = fstat(fd, &st) == 0 && (!regular_only || S_ISREG(st.st_mode));
  if (ok) {
    // One byte more than the size, so that a file that did not grow ends in one read;
    // one that grew keeps being read to its end.
    size_t at = text->size();
    text->resize(at + (st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0) + 1);
    while (true) {
      if (at == text->size()) text->resize(text->size() * 2);
      const ssize_t n = read(fd, &(*text)[at], text->size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = n == 0;
        break;
      }
      at += static_cast<size_t>(n);
    }
    text->resize(at);
  }
  close(fd);
  return ok;
}

bool ReadRegularFile(const char* path, std::string* text) { return ReadFile(path, text, /*regular_only=*/true); }

// The login name getpwuid(uid) gives, without loading NSS when it need not (~0.4 ms of
// a ~3 ms submit; scripts under cron and in containers often have no $USER): where
// /etc/nsswitch.conf consults `files` first for passwd, glibc's answer is the first
// /etc/passwd line with that uid, so that line is read here. Anything else (another
// source first, no such line, compat "+"/"-" lines, an unreadable file) asks getpwuid.
std::string LoginName(uid_t uid) {
  auto slow = [uid]() -> std::string {
    const passwd* pw = getpwuid(uid);
    return pw != nullptr ? pw->pw_name : "";
  };
  std::string conf;
  if (!ReadFile("/etc/nsswitch.conf", &conf)) return slow();
  bool files_first = false;
  for (size_t pos = 0; pos < conf.size();) {
    size_t end = conf.find('\n', pos);
    if (end == std::string::npos) end = conf.size();
    std::string line = conf.substr(pos, end - pos);
    pos = end + 1;
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, 7, "passwd:") != 0) continue;
    const size_t source = line.find_first_not_of(" \t", start + 7);
    files_first = source != std::string::npos && line.compare(source, 5, "files") == 0 &&
                  (source + 5 == line.size() || line[source + 5] == ' ' || line[source + 5] == '\t');
  }
  std::string text;
  if (!files_first || !ReadFile("/etc/passwd", &text)) return slow();
  const std::string want = std::to_string(uid);
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '+' || line[0] == '-') return slow();
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    const size_t c3 = c2 == std::string::npos ? c2 : line.find(':', c2 + 1);
    if (c3 == std::string::npos) continue;
    if (line.compare(c2 + 1, c3 - c2 - 1, want) == 0) return line.substr(0, c1);
  }
  return slow();
}

// Non-empty environment variable, as CLI11's envname reads it.
const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamafleet;
  if (const char* mode = std::getenv("LLAMAFLEET_ONESHOT"); mode != nullptr && std::strcmp(mode, "0") == 0) {
    RunFullCli(argv, nullptr);
  }
  Request r;
  const char* why = nullptr;
  if (!ParseArgs(argc, argv, &r, &why)) RunFullCli(argv, why);
  if (std::getenv("LLAMAFLEET_TLS_CA") != nullptr) RunFullCli(argv, "TLS");
  if (std::strcmp(r.file, "-") == 0) RunFullCli(argv, "stdin");

  oneshot::CallOptions call;
  call.authority = r.coordinator != nullptr ? r.coordinator
                   : Env("LLAMAFLEET_COORDINATOR") != nullptr ? Env("LLAMAFLEET_COORDINATOR")
                                                              : kDefaultCoordinator;
  if (!SplitAddress(call.authority, &call.host, &call.port)) RunFullCli(argv, "coordinator address");
  if (r.timeout != nullptr && !ParseTimeoutMs(r.timeout, &call.timeout_ms)) RunFullCli(argv, "--timeout");

  // The caller's name as the full CLI finds it: --user, $USER, and the passwd entry only
  // when USER is unset.
  std::string user;
  if (r.user != nullptr) {
    user = r.user;
  } else if (const char* env = std::getenv("USER"); env != nullptr) {
    user = env;
  } else {
    user = LoginName(getuid());
  }
  const std::string token = r.token != nullptr ? r.token : Env("LLAMAFLEET_TOKEN") != nullptr ? Env("LLAMAFLEET_TOKEN") : "";
  // Metadata as clients/client/client.cc sends it; values gRPC would refuse go there too.
  if (!user.empty()) call.metadata.emplace_back("x-llamafleet-user", user);
  if (!token.empty()) call.metadata.emplace_back("authorization", "Bearer " + token);
  for (const auto& m : call.metadata) {
    if (!Printable(m.second)) RunFullCli(argv, "metadata that is not printable ASCII");
  }

  std::string text;
  if (!ReadRegularFile(r.file, &text)) RunFullCli(argv, "not a readable regular file");
  const std::string key = r.idempotency_key != nullptr ? r.idempotency_key : "";

  const oneshot::CallResult result =
      oneshot::UnaryCall(call, kSubmitPath, oneshot::EncodeSubmitJobFileRequest(text, false, key));
  if (!result.ok) RunFullCli(argv, result.error.c_str());
  if (result.grpc_status != 0) {
    const std::string status = "grpc-status " + std::to_string(result.grpc_status) + ": " + result.grpc_message;
    RunFullCli(argv, status.c_str());
  }
  std::vector<oneshot::SubmittedJob> jobs;
  if (!oneshot::DecodeSubmitJobsResponse(reinterpret_cast<const uint8_t*>(result.message.data()),
                                         result.message.size(), &jobs) ||
      jobs.empty()) {
    RunFullCli(argv, "malformed SubmitJobsResponse");
  }

  // What the full CLI prints (PrintSubmitted), through the same escaping.
  std::string out;
  for (const oneshot::SubmittedJob& job : jobs) {
    if (job.created) {
      out += "job " + job.id + " created\n";
    } else {
      out += "job " + job.id + " already exists (idempotency key " + job.idempotency_key + ")\n";
    }
  }
  out = cli::EscapeControls(out);
  size_t written = 0;
  while (written < out.size()) {
    const ssize_t n = write(STDOUT_FILENO, out.data() + written, out.size() - written);
    if (n < 0 && errno == EINTR) continue;
    // Like the full CLI: a closed pipe is SIGPIPE (default disposition), other write
    // errors do not change the exit code.
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  return 0;
}
