#include "tests/graph/test_devices.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
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

std::string FreshFolderForTest(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string folder = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  const std::string command = "rm -rf '" + folder + "' && mkdir -p '" + folder + "'";
  if (std::system(command.c_str()) != 0) return "";
  return folder;
}

std::set<std::string> FolderEntries(const std::string& folder) {
  std::set<std::string> names;
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  ::closedir(dir);
  return names;
}

}  // namespace fuselage
