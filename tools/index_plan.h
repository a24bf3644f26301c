// `mocker index`'s flags → the index service's configuration, or a usage error (exit 2) whose
// message names the flag and what is wrong. Socket-free: reads the fleet file and key files it
// is given, opens nothing else (tests/tools/index_plan_test.cpp).
//
//   auto config = indexConfigFromFlags(flags, /*block_size_given=*/…);
//   if (!config) { err << "mocker index: " << config.error().message; return 2; }
#pragma once

#include "base/result.h"
#include "tools/index/index_service.h"
#include "tools/index_command.h"

namespace mocker::tools {

/// `block_size_given`: --block-size was on the command line (else a --fleet file's block size
/// is the token queries' default). The stats and verify callbacks are left empty.
Result<index::IndexServiceConfig> indexConfigFromFlags(const IndexFlags& flags,
                                                       bool block_size_given);

}  // namespace mocker::tools
