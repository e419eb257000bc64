#ifndef LLAMAFLEET_CLIENTS_CLI_CLI_H_
#define LLAMAFLEET_CLIENTS_CLI_CLI_H_

// The `llamafleet` command line: parses flags, talks to the coordinator, prints.
//
// Contract: returns the process exit code. 0 on success; 2 for a usage error (bad flag,
// missing argument); 1 for anything else, after writing exactly one line
// "llamafleet: <message>" to `err`; 128+N, with nothing on `err`, when signal N (SIGINT,
// SIGTERM) stopped a streaming command (`logs -f`, `watch`, `wait`). `watch`, `wait` and
// `submit --wait` exit 3 when a job they waited for FAILED, else 4 when one was CANCELLED
// (under `wait --for succeeded`, the default), else 5 when --timeout passed first, each
// after the one line on `err`. Results go to `out` only;
// `in` is read by `submit -f -`. `watch` draws its live progress line only when `out` is
// std::cout and stdout is a terminal.

#include <iosfwd>

namespace llamafleet::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitJobFailed = 3;
inline constexpr int kExitJobCancelled = 4;
inline constexpr int kExitJobTimeout = 5;
// Plus the signal number.
inline constexpr int kExitSignalBase = 128;

int RunCli(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);

// For a main() that ends the process right after RunCli with std::_Exit: RunCli then
// leaves its gRPC channels open instead of tearing them down (gRPC's shutdown waits for
// its threads, a cost every scripted command would pay for nothing).
void LeaveConnectionsOpenAtExit();

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_CLI_H_
