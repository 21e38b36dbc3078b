#include "graph/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fuselage {
namespace {

// An error for a failed system call on `path`, with the errno text and the status code that
// errno maps to (ENOENT -> NotFound, EACCES -> PermissionDenied, ENOSPC -> ResourceExhausted…).
absl::Status ErrnoError(int error_number, absl::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, " '", path, "': ", std::strerror(error_number)));
}

// Closes a descriptor on scope exit unless released; for the error paths only (a successful
// write checks its own close()).
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Writes all of `contents` to `fd`, retrying short writes and EINTR.
absl::Status WriteAll(int fd, absl::string_view contents, const std::string& path) {
  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    // One write is capped below SSIZE_MAX (Linux moves at most ~2 GiB per call anyway).
    const size_t chunk = std::min<size_t>(left, size_t{1} << 30);
    const ssize_t written = ::write(fd, data, chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write", path);
    }
    if (written == 0) {
      return absl::DataLossError(absl::StrCat("cannot write '", path, "': no progress"));
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

// Writes `contents` into an existing non-regular file (a device, a FIFO) that cannot be
// renamed over; every write and the close are checked, so /dev/full reports ENOSPC.
absl::Status WriteInPlace(const std::string& path, absl::string_view contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  FdCloser closer(fd);
  if (absl::Status written = WriteAll(fd, contents, path); !written.ok()) return written;
  if (::close(closer.Release()) != 0) return ErrnoError(errno, "cannot close", path);
  return absl::OkStatus();
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Creates a new, empty temporary file next to `target` (same folder, so the final rename stays
// on one file system) and returns its descriptor; `temp_path` receives its name. The name is
// hidden and unique per process and call; O_EXCL refuses to reuse anything already there.
absl::StatusOr<int> CreateTemporaryNextTo(const std::string& target, std::string& temp_path) {
  static std::atomic<unsigned> counter{0};
  const size_t slash = target.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : target.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path = absl::StrCat(folder, ".", base, ".tmp.", ::getpid(), ".", counter++);
    // 0666 less the umask: the mode a plain new file would get.
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST) {
      return ErrnoError(errno, absl::StrCat("cannot create a temporary file in '", FolderOf(target),
                                            "' to write"),
                        target);
    }
  }
  return absl::AlreadyExistsError(
      absl::StrCat("cannot write '", target, "': no free temporary file name in its folder"));
}

// Writes `contents` to a fresh temporary next to `target`, makes it durable and renames it over
// `target`. `replaced`, if not null, is the file being replaced: the new one gets its
// permission bits and, where allowed, its owner. On any failure the temporary is removed and
// `target` is untouched.
absl::Status ReplaceAtomically(const std::string& target, absl::string_view contents,
                               const struct stat* replaced, const std::string& shown_path) {
  std::string temp_path;
  absl::StatusOr<int> created = CreateTemporaryNextTo(target, temp_path);
  if (!created.ok()) return created.status();
  FdCloser closer(*created);
  auto fail = [&](absl::Status status) {
    ::close(closer.Release());
    ::unlink(temp_path.c_str());
    return status;
  };
  if (replaced != nullptr) {
    // Best effort: only root may give a file to another user, and a file of our own needs
    // nothing. (Before fchmod: fchown may clear set-user-ID bits.)
    if (replaced->st_uid != ::geteuid() || replaced->st_gid != ::getegid()) {
      (void)::fchown(*created, replaced->st_uid, replaced->st_gid);
    }
    if (::fchmod(*created, replaced->st_mode & 07777) != 0) {
      return fail(ErrnoError(errno, "cannot set the mode of a temporary file for", shown_path));
    }
  }
  if (absl::Status written = WriteAll(*created, contents, shown_path); !written.ok()) {
    return fail(written);
  }
  // Data on disk before the rename makes it visible: a crash then leaves the old file or the
  // whole new one, never an empty or partial file under the final name.
  if (::fsync(*created) != 0) return fail(ErrnoError(errno, "cannot sync", shown_path));
  if (::close(closer.Release()) != 0) {
    const int error_number = errno;
    ::unlink(temp_path.c_str());
    return ErrnoError(error_number, "cannot close", shown_path);
  }
  if (::rename(temp_path.c_str(), target.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(temp_path.c_str());
    return ErrnoError(error_number, "cannot replace", shown_path);
  }
  // Makes the rename itself durable. Best effort: some file systems refuse fsync on a folder,
  // and the file is already complete under its final name.
  const int folder = ::open(FolderOf(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {
    ::fsync(folder);
    ::close(folder);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> ReadFileBoundedInto(
    const std::string& path, size_t max_bytes,
    absl::FunctionRef<char*(size_t capacity, size_t length)> grow, const HeadCheck& check_head) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  FdCloser closer(fd);
  struct stat info;
  if (::fstat(fd, &info) != 0) return ErrnoError(errno, "cannot stat", path);
  if (S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read '", path, "': it is a directory, not a file"));
  }
  // The size of a regular file only sizes the first buffer; the loop below reads until EOF
  // whatever it says (a device reports 0, a growing file more than it said).
  const size_t limit_plus_one = max_bytes == SIZE_MAX ? SIZE_MAX : max_bytes + 1;
  size_t capacity = size_t{64} << 10;
  if (S_ISREG(info.st_mode) && info.st_size >= 0) {
    capacity = static_cast<size_t>(info.st_size) + 1;  // +1 to see EOF without growing
  }
  capacity = std::min(std::max<size_t>(capacity, 4096), limit_plus_one);
  char* buffer = grow(capacity, 0);
  size_t length = 0;
  auto over_limit = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is larger than the limit of ", max_bytes, " bytes"));
  };
  while (true) {
    if (length == capacity) {
      if (length >= limit_plus_one) return over_limit();
      capacity = std::min(limit_plus_one, std::max(length * 2, length + 4096));
      buffer = grow(capacity, length);
    }
    const ssize_t got = ::read(fd, buffer + length, capacity - length);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot read", path);
    }
    if (got == 0) break;
    if (length == 0 && check_head) {
      if (absl::Status head = check_head(absl::string_view(buffer, static_cast<size_t>(got)));
          !head.ok()) {
        return absl::Status(head.code(), absl::StrCat("'", path, "': ", head.message()));
      }
    }
    length += static_cast<size_t>(got);
    if (length > max_bytes) return over_limit();
  }
  return length;
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes,
                                            const HeadCheck& check_head) {
  std::string bytes;
  absl::StatusOr<size_t> length = ReadFileBoundedInto(
      path, max_bytes,
      [&bytes](size_t capacity, size_t) {
        bytes.resize(capacity);
        return bytes.data();
      },
      check_head);
  if (!length.ok()) return length.status();
  bytes.resize(*length);
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  if (path.empty()) return absl::InvalidArgumentError("cannot write a file with an empty path");
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    // Nothing there yet (or a dangling symlink, which the rename replaces): a new file.
    if (errno != ENOENT) return ErrnoError(errno, "cannot write", path);
    return ReplaceAtomically(path, contents, /*replaced=*/nullptr, path);
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write '", path, "': it is a directory, not a file"));
  }
  // Devices and FIFOs are not files to replace: renaming over /dev/null would replace the
  // device with a regular file.
  if (!S_ISREG(info.st_mode)) return WriteInPlace(path, contents);
  // A symlink is followed, so the link keeps pointing at the (replaced) file it named.
  std::string target = path;
  struct stat link_info;
  if (::lstat(path.c_str(), &link_info) == 0 && S_ISLNK(link_info.st_mode)) {
    std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr),
                                                         &std::free);
    if (resolved == nullptr) return ErrnoError(errno, "cannot resolve the symlink", path);
    target = resolved.get();
  }
  return ReplaceAtomically(target, contents, &info, path);
}

}  // namespace fuselage
