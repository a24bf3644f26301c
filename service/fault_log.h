// FaultLog: the JSONL fault log (`[faults] log`, `--fault-log FILE`): one line per injected
// fault (faultLogLine, service/fault_plan.h), written and flushed at once so that a crash fault
// leaves its own line behind. Shared by a fleet's workers (one file, lines never interleave).
//
// Thread-safe: write() may be called from any thread.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/result.h"

namespace mocker::service {

class FaultLog final {
 public:
  /// Creates (truncates) `path`; the error names the file.
  static Result<std::shared_ptr<FaultLog>> open(const std::string& path);
  ~FaultLog();
  FaultLog(const FaultLog&) = delete;
  FaultLog& operator=(const FaultLog&) = delete;

  /// Appends `line` and a newline, flushed; false if the write failed (counted by the caller).
  bool write(std::string_view line);

 private:
  explicit FaultLog(std::FILE* file) : file_(file) {}
  std::mutex mutex_;
  std::FILE* file_;
};

}  // namespace mocker::service
