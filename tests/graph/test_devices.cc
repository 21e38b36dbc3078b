#include "tests/graph/test_devices.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fuselage {
namespace {

std::string PrivateDevice(const std::string& name, const std::string& real, unsigned minor) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/test_device_" + name;
  struct stat info;
  if (::stat(path.c_str(), &info) != 0 || !S_ISCHR(info.st_mode) ||
      info.st_rdev != makedev(1, minor)) {
    ::unlink(path.c_str());
    // Linux's memory devices: major 1; null is minor 3, full minor 7.
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, minor)) != 0) return real;
  }
  // A file system mounted nodev refuses to open it: then the real device it is.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    ::unlink(path.c_str());
    return real;
  }
  ::close(fd);
  return path;
}

}  // namespace

std::string FullDeviceForTest() { return PrivateDevice("full", "/dev/full", 7); }
std::string NullDeviceForTest() { return PrivateDevice("null", "/dev/null", 3); }

}  // namespace fuselage
