// Output files checked before any work (a report, a fleet file): so a run does not end, or a
// service start, only to find that its output cannot be written.
#pragma once

#include <string>

#include "base/result.h"

namespace mocker::tools {

/// Checks that `path` can be written by opening it: an existing file is opened for appending
/// (not truncated), a missing one is created and removed again. Refused as well: a directory,
/// and a file on procfs or sysfs (they open for writing, even /proc/self/status as root, but hold
/// no written file). The error starts with `option` and names `path` and the reason (the missing
/// directory, errno's text). Character devices (/dev/stdout, /dev/null) are accepted.
Status checkOutputFile(const std::string& option, const std::string& path);

}  // namespace mocker::tools
