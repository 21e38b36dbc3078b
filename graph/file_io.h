// Whole-file reads and writes for everything fuselage reads from or writes to disk: model
// files, configs, .npy tensors, dot pictures and every CLI `-o`.
//
// Reading is bounded: a file is read with read() until EOF, never sized first, so a device or
// a pipe that never ends is refused at the limit rather than read as empty or forever.
// Writing is atomic (DESIGN.md "Files"): a written file is complete or absent, and a failed
// write leaves the old file exactly as it was.
#ifndef FUSELAGE_GRAPH_FILE_IO_H_
#define FUSELAGE_GRAPH_FILE_IO_H_

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fuselage {

// Reads the whole file, refusing more than max_bytes (InvalidArgument naming the path and the
// limit). Reads with read() until EOF — never sizes a file with tellg/stat — so /dev/zero or a
// pipe is refused at the limit instead of read as empty or forever. NotFound / PermissionDenied /
// FailedPrecondition (a directory) name the path.
//
// `check_head`, when given, sees the bytes of the first read (at least one byte; fewer than a
// header when a pipe delivers them slowly, so it refuses only what those bytes already rule
// out): an error it returns refuses the file there, so /dev/zero given as a model or .npy is
// refused on its first bytes instead of at the limit.
using HeadCheck = std::function<absl::Status(absl::string_view first_bytes)>;
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes,
                                            const HeadCheck& check_head = nullptr);

// ReadFileBounded's reading, with the same errors, into storage the caller owns (LoadModel
// reads a model into a buffer that is not zero-filled first, a mapping of its own when large).
// `grow(capacity, length)` must return a buffer of at least `capacity` bytes whose first
// `length` bytes are the ones read so far; it is called once for a regular file whose size
// does not change while it is read. Returns how many bytes the file held.
absl::StatusOr<size_t> ReadFileBoundedInto(const std::string& path, size_t max_bytes,
                                           absl::FunctionRef<char*(size_t capacity,
                                                                   size_t length)> grow,
                                           const HeadCheck& check_head = nullptr);

// Replaces `path` with `contents` atomically: a temporary file in path's folder, write all,
// fflush/fsync, close checked, rename over path. Any failure leaves the old file exactly as it was
// and removes the temporary. A path that exists and is not a regular file (a character device such
// as /dev/full or /dev/null, a FIFO) is written in place, never renamed over, with every write and
// close checked (so `-o /dev/full` is an error: ENOSPC). Errors name the path and the errno text.
//
// A symlink to a regular file is followed: its target is replaced (the link still points at
// it). A replaced file keeps its permission bits (and, where the caller may, its owner); a
// new file gets 0666 less the umask.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_FILE_IO_H_
