// llamafleet: the command-line client for the coordinator. All logic is in cli.cc.
#include <iostream>

#include "clients/cli/cli.h"

int main(int argc, char** argv) {
  return llamafleet::cli::RunCli(argc, argv, std::cin, std::cout, std::cerr);
}
