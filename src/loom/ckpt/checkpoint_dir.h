#pragma once
// The checkpoint directory (checkpoint.dir): one `step-NNNNNNN/` per complete checkpoint, a
// `latest` file naming the newest, and `.step-NNNNNNN.partial/` while one is being written.
// NOTE [Atomic checkpoints]: a checkpoint is written into its `.partial` directory, every file
// synced, and only then renamed to `step-NNNNNNN` (a rename within one directory is atomic) and
// the directory synced; `latest` is replaced the same way after it. A crash at any moment leaves
// either the new checkpoint complete or none of it under a step name, so the previous one stays
// the latest complete checkpoint. A reader trusts `latest` only if it names a complete
// checkpoint, and otherwise takes the highest complete step. Nothing but loom's own names is
// ever removed from the directory.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::ckpt {

std::string step_name(int64_t step);           // "step-0000100"
std::string partial_name(int64_t step);        // ".step-0000100.partial"

// Throws InputError when checkpoints cannot be written to `dir`: it is a file, or it (or, when
// it does not exist yet, its nearest existing parent) is not a writable directory.
void check_writable_dir(const std::string& dir);

// The complete checkpoints in `dir` (step directories with a manifest.json), by step.
std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string& dir);
// The latest complete checkpoint's directory; none when `dir` holds none.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// What a user names as a checkpoint: `dir` itself when it holds a manifest, else (a checkpoint.dir)
// its latest complete checkpoint; a directory with neither is returned as is, for the manifest
// reader to name what is wrong (`loom ckpt`, `loom generate`).
std::string checkpoint_of(const std::string& dir);

// Makes `dir` and a fresh `.partial` directory for `step` in it (removing a stale one); returns it.
std::string begin_partial(const std::string& dir, int64_t step);
// Syncs the partial directory, renames it to its step name (setting aside a complete checkpoint
// of the same step first, removed once the new one is in place), points `latest` at it and
// removes complete checkpoints beyond the newest `keep` and stale partial ones. Error when the
// file system refuses; the previous latest checkpoint is untouched until the rename.
void commit_partial(const std::string& dir, int64_t step, int64_t keep);

// Syncs a file or directory to the disk (directories: their entries).
void sync_path(const std::string& path);
// Writes `text` as the file `path` and syncs it.
void write_synced(const std::string& path, const std::string& text);

}  // namespace loom::ckpt
