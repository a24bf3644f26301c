#include "tools/output_path.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace mocker::tools {

Status checkOutputFile(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  const auto fail = [&](const std::string& why) {
    return invalidArgument(option + ": cannot write '" + path + "': " + why);
  };
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return invalidArgument(option + ": '" + path + "' is a directory");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    return fail("directory '" + dir.string() + "' does not exist");
  }
  struct statfs on {};
  const bool exists = fs::exists(p, ec);
  if (::statfs(exists ? path.c_str() : dir.c_str(), &on) == 0 &&
      (on.f_type == PROC_SUPER_MAGIC || on.f_type == SYSFS_MAGIC)) {
    return fail(std::string("it is on ") + (on.f_type == PROC_SUPER_MAGIC ? "procfs" : "sysfs") +
                ", which holds no written files");
  }
  if (exists) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fail(std::strerror(errno));
    ::close(fd);
    return {};
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail(std::strerror(errno));
  ::close(fd);
  ::unlink(path.c_str());
  return {};
}

}  // namespace mocker::tools
