// `fuselage dot MODEL [-o FILE]`: loads MODEL and draws it (graph/dot.h says what the
// picture shows). FILE ending in .svg, .png or .pdf is rendered by Graphviz's `dot`;
// any other FILE (g.dot, g.gv) gets the DOT text, and so does stdout (no -o, or `-o -`).
// FILE is replaced atomically (graph/file_io.h): the picture is drawn into a temporary
// folder first, so a missing or failing `dot` leaves the old FILE as it was, and "wrote"
// is printed only once FILE holds the whole picture.
#include "tools/dot_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/dot.h"
#include "graph/file_io.h"
#include "graph/status_macros.h"

extern char** environ;

namespace fuselage {
namespace {

// A rendered picture is at most this large (a 10^5-node SVG is some tens of MB).
constexpr size_t kMaxPictureBytes = size_t{1} << 30;

// The Graphviz output format FILE's extension asks for, or "" for DOT text.
std::string RenderFormat(absl::string_view path) {
  const std::string lower = absl::AsciiStrToLower(path);
  for (absl::string_view format : {"svg", "png", "pdf"}) {
    if (absl::EndsWith(lower, absl::StrCat(".", format))) return std::string(format);
  }
  return "";
}

// A folder under $TMPDIR (or /tmp) holding dot's input, output and error text; removed,
// with what it holds, when this goes out of scope.
class ScratchFolder {
 public:
  static absl::StatusOr<ScratchFolder> Make() {
    const char* tmpdir = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                                       "/fuselage-dot-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("dot: cannot make a temporary folder ", pattern, ": ", strerror(errno)));
    }
    return ScratchFolder(pattern);
  }
  ScratchFolder(ScratchFolder&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  ~ScratchFolder() {
    if (path_.empty()) return;
    for (const char* name : {"/in.dot", "/picture", "/errors"}) unlink((path_ + name).c_str());
    rmdir(path_.c_str());
  }
  std::string File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

 private:
  explicit ScratchFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::Status Render(const GraphModule& gm, const std::string& path,
                    const std::string& format) {
  ASSIGN_OR_RETURN(std::string picture, RenderWithGraphviz(ToDot(gm), format));
  return WriteFileAtomically(path, picture);
}

}  // namespace

absl::StatusOr<std::string> RenderWithGraphviz(absl::string_view dot_text,
                                               absl::string_view format) {
  ASSIGN_OR_RETURN(ScratchFolder scratch, ScratchFolder::Make());
  const std::string input = scratch.File("in.dot");
  const std::string picture = scratch.File("picture");
  const std::string errors = scratch.File("errors");
  RETURN_IF_ERROR(WriteFileAtomically(input, dot_text));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errors.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string type_flag = absl::StrCat("-T", format);
  std::string output_flag = absl::StrCat("-o", picture);
  std::string program = "dot";
  std::vector<char*> argv = {program.data(), type_flag.data(), output_flag.data(),
                             const_cast<char*>(input.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "dot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dot: drawing a .", format, " needs Graphviz's `dot` program on PATH, and there is "
        "none (install it: `apt-get install graphviz`, or `bash tools/install_deps.sh`); "
        "`-o FILE.dot` writes the DOT text without it"));
  }
  if (spawned != 0) {
    return absl::InternalError(
        absl::StrCat("dot: cannot run Graphviz's `dot`: ", strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("dot: waiting for `dot`: ", strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    absl::StatusOr<std::string> said = ReadFileBounded(errors, 1 << 16);
    std::string first_line =
        said.ok() ? std::string(absl::StripAsciiWhitespace(
                        std::vector<std::string>(absl::StrSplit(*said, '\n'))[0]))
                  : "";
    return absl::InternalError(absl::StrCat(
        "dot: Graphviz's `dot ", type_flag, "` failed (",
        WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")", first_line.empty() ? "" : ": ", first_line));
  }
  return ReadFileBounded(picture, kMaxPictureBytes);
}

Command DotCommand() {
  Command command;
  command.name = "dot";
  command.usage = "dot MODEL [-o FILE]";
  command.summary =
      "draw the graph: FILE.svg / .png / .pdf rendered by Graphviz, else DOT text";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed,
                     ParseArgs(command.name, args, {{{"-o", "--output"}, true,
                                                  "output file: .dot, or .svg / .png / .pdf "
                                                  "rendered by graphviz",
                                                  "FILE", "DOT on stdout"}}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    const std::string output = parsed.Has("-o") ? parsed.flags.at("-o") : "-";
    if (output == "-") {
      context.out << ToDot(*gm);
      return absl::OkStatus();
    }
    if (output.empty()) return UsageError("dot: -o needs a file name");
    const std::string path = context.ResolvePath(output);
    const std::string format = RenderFormat(output);
    if (format.empty()) {
      RETURN_IF_ERROR(WriteFileAtomically(path, ToDot(*gm)));
    } else {
      RETURN_IF_ERROR(Render(*gm, path, format));
    }
    context.out << "wrote " << output << " (" << gm->graph().size() << " nodes)\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
