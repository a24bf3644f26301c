#include "service/fault_log.h"

#include <cerrno>
#include <cstring>

namespace mocker::service {

Result<std::shared_ptr<FaultLog>> FaultLog::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return Error{ErrorCode::IoError,
                 "fault log '" + path + "': cannot create: " + std::strerror(errno)};
  }
  return std::shared_ptr<FaultLog>(new FaultLog(f));
}

FaultLog::~FaultLog() { std::fclose(file_); }

bool FaultLog::write(std::string_view line) {
  const std::lock_guard lock(mutex_);
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() &&
                  std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  return ok;
}

}  // namespace mocker::service
