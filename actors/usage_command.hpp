// `tether usage --config FILE [--from X] [--to Y] [--key K] [--model M] [--by hour|day|model]
// [--json]` (contract: "The ledger"): prints the ledger of the config's gateway from its file,
// opened read-only beside the gateway that may be writing it. Exit codes: 0; 1 when the config or
// the ledger cannot be read (the message names the file); 2 on bad arguments (with the usage).
#pragma once

#include <string>
#include <vector>

namespace tether {

// `args`: what follows `usage` on the command line.
int run_usage_command(const std::vector<std::string>& args);

}  // namespace tether
