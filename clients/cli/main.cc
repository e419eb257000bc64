// llamafleet: the command-line client for the coordinator. The command tree is in cli.cc,
// each command in its cmd_*.cc.
//
// Scripts start this once per command, so start-up and exit are kept short: no absl
// deadlock-detection graph, and no teardown at exit (std::_Exit after flushing; the OS
// closes the connection).
#include <cstdlib>
#include <iostream>

#include "absl/synchronization/mutex.h"
#include "clients/cli/cli.h"

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  llamafleet::cli::LeaveConnectionsOpenAtExit();
  const int code = llamafleet::cli::RunCli(argc, argv, std::cin, std::cout, std::cerr);
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);
}
