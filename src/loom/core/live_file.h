#pragma once
// NOTE [Live output files]: a run's metrics and trace are records that a user reads while the run
// goes (`tail -f`, `loom plot` of a running job) and after it ends, however it ends. So they are
// written in place under the name the user gave, not through a temporary (NOTE [Output files]
// keeps the write-then-rename for whole files: prepared data, exports, plots, plans):
//  - each append is one write(2) of whole records, so the file holds whole records at every
//    moment a writer can be stopped (SIGKILL included); a reader that meets a last line without
//    its newline is looking at a record being written and skips it;
//  - a fresh run starts the file empty; a resumed run continues it (LiveFile::resume): the records
//    it keeps are written to a temporary that is renamed over the file, so a crash while resuming
//    leaves the old file or the new one, never a mix, and a record of a step past the checkpoint
//    (which the resumed run trains again) gives way to the new run's;
//  - appends and close() may come from different threads (a rank whose peer died finalises its
//    files from its watch thread, NOTE [Interrupts]); after close() appends are dropped, as the
//    process is ending.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace loom {

class LiveFile {
 public:
  LiveFile();  // closed: appends are dropped
  ~LiveFile();
  LiveFile(LiveFile&&) noexcept;
  LiveFile& operator=(LiveFile&&) noexcept;

  // Opens `path` for writing, changing nothing yet: InputError when it cannot be. Several outputs
  // are all opened before any begins, so a run refused at one of them leaves the others as they
  // were (one this call created is removed again unless begun).
  static LiveFile open(const std::string& path);
  // `path` written from its start (what was there is replaced).
  void start();
  // `path` continued: its lines for which `keep` is true stay, in order, the rest (and a last line
  // without its newline) go; then appends follow them. A file missing under `path` but left as
  // its hidden temporary by an earlier loom (`.NAME.loom-partial`) is continued from that.
  void resume(const std::function<bool(std::string_view line)>& keep);

  bool is_open() const;
  const std::string& path() const;
  // One write of `bytes` (whole records); Error naming the path when the disk refuses. Thread-safe.
  void append(std::string_view bytes);
  // Writes `tail` (may be empty) and closes; later appends are dropped. Thread-safe, idempotent.
  void close(std::string_view tail = {});

 private:
  struct State;
  explicit LiveFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace loom
