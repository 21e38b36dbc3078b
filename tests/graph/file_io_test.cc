// graph/file_io: bounded reads refuse what never ends or is too large; atomic writes leave the
// old file byte-identical when they fail, leave no temporary behind, report a full device, and
// follow a symlink instead of replacing it.
#include "graph/file_io.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/graph/test_devices.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

std::string FreshFolder(const std::string& name) {
  const std::string folder = FreshFolderForTest("file_io_" + name);
  EXPECT_FALSE(folder.empty()) << name;
  return folder;
}

// Written with std::ofstream, independently of the code under test.
void PutFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good());
}

std::string GetFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ReadFileBounded, ReadsAWholeFileUpToExactlyTheLimit) {
  const std::string folder = FreshFolder("read_exact");
  const std::string bytes(10000, 'x');
  PutFile(folder + "/f", bytes);
  absl::StatusOr<std::string> read = ReadFileBounded(folder + "/f", 10000);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  PutFile(folder + "/empty", "");
  read = ReadFileBounded(folder + "/empty", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST(ReadFileBounded, RefusesAFileOneByteOverTheLimit) {
  const std::string folder = FreshFolder("read_over");
  PutFile(folder + "/f", std::string(10001, 'x'));
  absl::StatusOr<std::string> read = ReadFileBounded(folder + "/f", 10000);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(folder + "/f"));
  EXPECT_THAT(read.status().message(), HasSubstr("10000"));
}

// /dev/zero has size 0 by stat and never ends: a sized read returned "", an unbounded one
// would never finish.
TEST(ReadFileBounded, RefusesDevZeroAtTheLimit) {
  absl::StatusOr<std::string> read = ReadFileBounded("/dev/zero", 1 << 20);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("/dev/zero"));
  EXPECT_THAT(read.status().message(), HasSubstr("1048576"));
}

TEST(ReadFileBounded, ADirectoryIsAFailedPrecondition) {
  const std::string folder = FreshFolder("read_dir");
  absl::StatusOr<std::string> read = ReadFileBounded(folder, 100);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(), HasSubstr(folder));
  EXPECT_THAT(read.status().message(), HasSubstr("directory"));
}

TEST(ReadFileBounded, AMissingFileIsNotFound) {
  const std::string folder = FreshFolder("read_missing");
  absl::StatusOr<std::string> read = ReadFileBounded(folder + "/nope", 100);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(folder + "/nope"));
  EXPECT_THAT(read.status().message(), HasSubstr("No such file"));
}

TEST(WriteFileAtomically, WritesANewFileAndLeavesNoTemporary) {
  const std::string folder = FreshFolder("write_new");
  ASSERT_TRUE(WriteFileAtomically(folder + "/out.bin", "hello").ok());
  EXPECT_EQ(GetFile(folder + "/out.bin"), "hello");
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"out.bin"});
  // A relative path (no folder part) works too.
  char* cwd_buffer = ::getcwd(nullptr, 0);
  ASSERT_NE(cwd_buffer, nullptr);
  const std::string cwd = cwd_buffer;
  std::free(cwd_buffer);
  ASSERT_EQ(::chdir(folder.c_str()), 0);
  const absl::Status relative = WriteFileAtomically("rel.txt", "r");
  ASSERT_EQ(::chdir(cwd.c_str()), 0);
  ASSERT_TRUE(relative.ok()) << relative;
  EXPECT_EQ(GetFile(folder + "/rel.txt"), "r");
  EXPECT_EQ(FolderEntries(folder), (std::set<std::string>{"out.bin", "rel.txt"}));
}

TEST(WriteFileAtomically, ReplacesAnExistingFileKeepingItsMode) {
  const std::string folder = FreshFolder("write_replace");
  const std::string path = folder + "/model.bin";
  PutFile(path, std::string(5000, 'o'));
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(GetFile(path), "new");
  struct stat info;
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"model.bin"});

  // Another user's file keeps its owner (only checkable where we may chown: as root).
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 4242, 4343), 0);
    ASSERT_TRUE(WriteFileAtomically(path, "newer").ok());
    ASSERT_EQ(::stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, 4242u);
    EXPECT_EQ(info.st_gid, 4343u);
    EXPECT_EQ(info.st_mode & 07777, 0640u);
    EXPECT_EQ(GetFile(path), "newer");
  }
}

// A real write failure over an existing file, also as root: RLIMIT_FSIZE makes write() fail
// with EFBIG past 4 KiB. The old file must stay byte-identical and no temporary may remain.
TEST(WriteFileAtomically, AFailedOverwriteLeavesTheOldFileByteIdentical) {
  const std::string folder = FreshFolder("write_fails");
  const std::string path = folder + "/model.bin";
  const std::string old_bytes = "the old model, still loadable";
  PutFile(path, old_bytes);

  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status status = WriteFileAtomically(path, std::string(64 << 10, 'n'));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("File too large"));
  EXPECT_EQ(GetFile(path), old_bytes);
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"model.bin"});
}

// /dev/full is a character device: written in place (never renamed over), and its ENOSPC
// is an error instead of a lost write.
TEST(WriteFileAtomically, DevFullIsAnErrorAndStaysADevice) {
  const std::string full = FullDeviceForTest();
  const absl::Status status = WriteFileAtomically(full, std::string(890, 'm'));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr(full));
  EXPECT_THAT(status.message(), HasSubstr("No space left on device"));
  struct stat info;
  ASSERT_EQ(::stat(full.c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST(WriteFileAtomically, DevNullSucceedsAndStaysADevice) {
  const std::string null = NullDeviceForTest();
  ASSERT_TRUE(WriteFileAtomically(null, "discarded").ok());
  struct stat info;
  ASSERT_EQ(::stat(null.c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST(WriteFileAtomically, AFolderThatIsAFileIsAnErrorNamingThePath) {
  const std::string folder = FreshFolder("write_notdir");
  PutFile(folder + "/plain", "not a folder");
  const absl::Status status = WriteFileAtomically(folder + "/plain/out.bin", "x");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(folder + "/plain/out.bin"));
  EXPECT_THAT(status.message(), HasSubstr("Not a directory"));
  EXPECT_EQ(GetFile(folder + "/plain"), "not a folder");
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"plain"});
}

TEST(WriteFileAtomically, AMissingFolderIsNotFound) {
  const std::string folder = FreshFolder("write_nofolder");
  const absl::Status status = WriteFileAtomically(folder + "/no/such/out.bin", "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(folder + "/no/such/out.bin"));
  EXPECT_TRUE(FolderEntries(folder).empty());
}

TEST(WriteFileAtomically, ADirectoryIsAFailedPrecondition) {
  const std::string folder = FreshFolder("write_dir");
  ASSERT_EQ(::mkdir((folder + "/sub").c_str(), 0755), 0);
  const absl::Status status = WriteFileAtomically(folder + "/sub", "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(folder + "/sub"));
  EXPECT_TRUE(FolderEntries(folder + "/sub").empty());
}

// Writing through a symlink replaces the file it points to; the link stays a link.
TEST(WriteFileAtomically, FollowsASymlinkToItsTarget) {
  const std::string folder = FreshFolder("write_symlink");
  ASSERT_EQ(::mkdir((folder + "/real").c_str(), 0755), 0);
  PutFile(folder + "/real/model.bin", "old");
  ASSERT_EQ(::symlink("real/model.bin", (folder + "/link.bin").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(folder + "/link.bin", "new").ok());
  struct stat info;
  ASSERT_EQ(::lstat((folder + "/link.bin").c_str(), &info), 0);
  EXPECT_TRUE(S_ISLNK(info.st_mode));
  EXPECT_EQ(GetFile(folder + "/real/model.bin"), "new");
  EXPECT_EQ(FolderEntries(folder), (std::set<std::string>{"link.bin", "real"}));
  EXPECT_EQ(FolderEntries(folder + "/real"), std::set<std::string>{"model.bin"});
}

// LoadModel reads through ReadFileBoundedInto: /dev/zero was sized 0 by tellg and parsed as
// an empty model ("format_version is 0"), a directory was "9223372036854775807 bytes".
// /dev/zero is refused on its first byte, under the default 2 GiB limit (it was read to the
// limit first).
TEST(LoadModelFile, ReadsBoundedAndNamesWhatIsWrong) {
  auto zero = LoadModel("/dev/zero");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(),
              HasSubstr("'/dev/zero': not a fuselage model file: its first byte 0x00 is a "
                        "protobuf field number 0"));

  const std::string folder = FreshFolder("load_model");
  auto dir = LoadModel(folder);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(dir.status().message(), HasSubstr("is a directory"));
  auto missing = LoadModel(folder + "/none.fsl");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  // A model saved and loaded back through the same path, binary and text.
  auto gm = ParseModelText(R"pb(
    format_version: 1
    root { type: "GraphModule" }
    graph {
      nodes { name: "x" op: PLACEHOLDER target: "x" }
      nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } }
    }
  )pb");
  ASSERT_TRUE(gm.ok()) << gm.status();
  for (const std::string name : {"m.fsl", "m.textproto"}) {
    const std::string path = folder + "/" + name;
    ASSERT_TRUE(SaveModel(**gm, path).ok());
    auto back = LoadModel(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(SerializeModel(**back), SerializeModel(**gm));
  }
  EXPECT_EQ(FolderEntries(folder), (std::set<std::string>{"m.fsl", "m.textproto"}));
}

// The first bytes a reader can rule out refuse the file there: a binary model's first byte
// must be a protobuf tag (wire type 7 never is), a text model holds no NUL.
TEST(LoadModelFile, RefusesOnFirstBytesThatCannotStartAModel) {
  const std::string folder = FreshFolder("model_head");
  PutFile(folder + "/wire7.fsl", std::string("\x0f", 1) + std::string(100, 'x'));
  auto wire7 = LoadModel(folder + "/wire7.fsl");
  EXPECT_THAT(wire7.status().message(),
              HasSubstr("first byte 0x0f has protobuf wire type 7, which cannot start a field"));
  PutFile(folder + "/nul.textproto", std::string("format_version: 1\0", 18));
  auto nul = LoadModel(folder + "/nul.textproto");
  EXPECT_THAT(nul.status().message(),
              HasSubstr("not a fuselage text model file: byte 17 is NUL"));
}

// check_head sees the first read's bytes once; its error, prefixed with the path, is the
// read's.
TEST(ReadFileBounded, AHeadCheckSeesTheFirstBytesOnceAndRefusesThere) {
  const std::string folder = FreshFolder("head_check");
  PutFile(folder + "/f", "abcdef");
  int calls = 0;
  std::string seen;
  auto accept = [&](absl::string_view head) {
    ++calls;
    seen = std::string(head);
    return absl::OkStatus();
  };
  absl::StatusOr<std::string> read = ReadFileBounded(folder + "/f", 100, accept);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "abcdef");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, "abcdef");
  auto refuse = [](absl::string_view) { return absl::InvalidArgumentError("no"); };
  read = ReadFileBounded("/dev/zero", size_t{1} << 40, refuse);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message(), "'/dev/zero': no");
}

}  // namespace
}  // namespace fuselage
