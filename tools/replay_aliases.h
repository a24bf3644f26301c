// The aliases of `mocker replay`'s flags (tools/replay_flags.h): the other spellings — vLLM
// bench's --num-prompts, --burstiness and --goodput, the disaggregated servers' flags and the
// fleet files — folded into the native flags after parsing, before the plan
// (tools/replay_plan.h) reads them.
//
//   Status s = applyReplayAliases(flags, givenFlags(*cmd));   // usage error when it fails
#pragma once

#include "base/result.h"
#include "tools/replay_flags.h"

namespace mocker::tools {

/// Folds the other spellings into the native flags: --connect-prefill / --prefill-fleet into
/// --connect / --fleet, --decode-fleet into --connect-decode / --connect-decode-cancel, --fleet
/// into --connect / --connect-cancel and the fleet's per-rank KV endpoints (both fleet files are
/// read here), --num-prompts into --num-requests, --burstiness into --arrival gamma, --goodput into
/// the --slo-*-ms values. Errors (usage errors, naming the flags): conflicting or incomplete
/// combinations, an unreadable fleet file, a malformed --goodput item.
Status applyReplayAliases(ReplayFlags& flags, const GivenFlags& given);

}  // namespace mocker::tools
