// NOTE [Output files]: outputs are checked against inputs by file identity, and written beside
// their target under a temporary name that only commit() renames into place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/live_file.h"
#include "loom/core/output_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_output_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void write(const std::string& p, const std::string& text) { std::ofstream(p) << text; }
  fs::path dir_;
};

TEST_F(OutputFileTest, OnlyCommitReplacesTheTarget) {
  write(path("m.jsonl"), "old\n");
  {
    OutputFile out(path("m.jsonl"));
    out.write("new\n");
    out.flush();
    EXPECT_EQ(read(path("m.jsonl")), "old\n");
    EXPECT_EQ(read(OutputFile::temporary_for(path("m.jsonl"))), "new\n");
  }  // destroyed without commit: the target stays, the temporary goes
  EXPECT_EQ(read(path("m.jsonl")), "old\n");
  EXPECT_FALSE(fs::exists(OutputFile::temporary_for(path("m.jsonl"))));
  OutputFile out(path("m.jsonl"));
  out.write("new\n");
  out.commit();
  EXPECT_EQ(read(path("m.jsonl")), "new\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  EXPECT_THROW(out.write("late\n"), Error);
}

TEST_F(OutputFileTest, AStaleTemporaryOfAKilledRunIsReplaced) {
  write(OutputFile::temporary_for(path("t.json")), "[\n{\"cut");
  OutputFile out(path("t.json"));
  out.write("[]\n");
  out.commit();
  EXPECT_EQ(read(path("t.json")), "[]\n");
  EXPECT_FALSE(fs::exists(OutputFile::temporary_for(path("t.json"))));
}

TEST_F(OutputFileTest, SameFileFollowsLinksAndDotDot) {
  write(path("data.bin"), "x");
  fs::create_hard_link(path("data.bin"), path("hard.bin"));
  fs::create_symlink(path("data.bin"), path("soft.bin"));
  fs::create_directories(dir_ / "sub");
  EXPECT_TRUE(same_file(path("data.bin"), path("hard.bin")));
  EXPECT_TRUE(same_file(path("soft.bin"), path("data.bin")));
  EXPECT_TRUE(same_file(path("sub/../data.bin"), path("data.bin")));
  EXPECT_TRUE(same_file(path("new.json"), path("sub/../new.json")));  // neither exists yet
  EXPECT_FALSE(same_file(path("new.json"), path("data.bin")));
}

TEST_F(OutputFileTest, OutputsAreCheckedAgainstInputsAndEachOther) {
  write(path("data.bin"), "x");
  auto refused = [&](std::vector<PathUse> outputs, const std::string& want) {
    try {
      check_output_paths({{path("data.bin"), "the data file"}}, outputs);
      ADD_FAILURE() << "accepted; want: " << want;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused({{path("data.bin"), "--metrics"}}, "is the same file as the data file");
  refused({{path("m"), "--metrics"}, {path("sub/../m"), "--trace"}}, "the directory");  // sub/ is missing
  fs::create_directories(dir_ / "sub");
  refused({{path("m"), "--metrics"}, {path("sub/../m"), "--trace"}}, "are the same file");
  refused({{path("sub"), "--trace"}}, "is a directory");
  refused({{path("nowhere/m"), "--metrics"}}, "does not exist");
  EXPECT_NO_THROW(check_output_paths({{path("data.bin"), "the data file"}},
                                     {{path("m"), "--metrics"}, {path("sub/t.json"), "--trace"}}));
}

// NOTE [Live output files]: a live file is under its own name from the start, each append is
// there at once, a resume keeps the lines it is asked to (dropping a cut last line), and an
// earlier loom's hidden temporary is continued when the named file is missing.
TEST_F(OutputFileTest, ALiveFileIsReadableAsItIsWrittenAndResumesItsKeptLines) {
  const std::string p = path("m.jsonl");
  write(p, "old\n");
  {
    LiveFile live = LiveFile::open(p);
    EXPECT_EQ(read(p), "old\n");  // opened: nothing changed yet
    live.start();
    EXPECT_EQ(read(p), "");  // a fresh run starts the file afresh
    live.append("1\n");
    EXPECT_EQ(read(p), "1\n");  // no buffer between the writer and a reader
    live.append("2\n3\n");
    live.close("end\n");
    live.append("dropped\n");  // after close(): the process is ending
  }
  EXPECT_EQ(read(p), "1\n2\n3\nend\n");
  EXPECT_FALSE(fs::exists(OutputFile::temporary_for(p)));
  write(p, "1\n2\n3\n4\n{\"cut");
  {
    LiveFile live = LiveFile::open(p);
    live.resume([](std::string_view line) { return line <= "2"; });
    EXPECT_EQ(read(p), "1\n2\n");
    live.append("3'\n");
  }
  EXPECT_EQ(read(p), "1\n2\n3'\n");
  fs::remove(p);
  write(OutputFile::temporary_for(p), "1\n2\n");  // left by a loom that wrote through a temporary
  { LiveFile::open(p).resume([](std::string_view) { return true; }); }
  EXPECT_EQ(read(p), "1\n2\n");
  EXPECT_FALSE(fs::exists(OutputFile::temporary_for(p)));
  EXPECT_THROW(LiveFile::open(path("missing/m.jsonl")), InputError);
  { LiveFile unused = LiveFile::open(path("new.jsonl")); }  // opened for a run that never began
  EXPECT_FALSE(fs::exists(path("new.jsonl")));
}

}  // namespace
}  // namespace loom
