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
// NOTE [A checkpoint folder belongs to one run]: each manifest records its run's identity
// (state.run.id: made when a run starts fresh, kept by every run resumed from it; "" in
// checkpoints older than the field). A fresh run into a directory holding checkpoints is refused
// (its pruning would keep the other run's higher steps, `latest` would jump between the runs and
// `loom generate DIR` would sample the wrong one), and so is a resume into a directory holding
// another run's. Pruning counts and removes the committing run's checkpoints only, and the
// reader's fallback (no valid `latest`) never picks a step of another run: when the complete
// checkpoints belong to several runs it refuses instead, naming them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/output_file.h"

namespace loom::ckpt {

std::string step_name(int64_t step);           // "step-0000100"
std::string partial_name(int64_t step);        // ".step-0000100.partial"

// Throws InputError when checkpoints cannot be written to `dir`: it is a file, or it (or, when
// it does not exist yet, its nearest existing parent) is not a writable directory.
void check_writable_dir(const std::string& dir);

// The complete checkpoints in `dir` (step directories with a manifest.json), by step.
std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string& dir);
// The run a checkpoint belongs to ("" for one older than run identities); none when its manifest
// cannot be read.
std::optional<std::string> run_of(const std::string& checkpoint);
// A new run identity: 16 hex digits from the clock, the process and the system's entropy.
std::string new_run_id();
// InputError when `dir` holds complete checkpoints of a run other than `run` (none: of any run, as
// for a fresh run), naming them, with a hint.
void check_dir_for_run(const std::string& dir, const std::optional<std::string>& run);
// The latest complete checkpoint's directory; none when `dir` holds none. InputError when `latest`
// names none and the complete checkpoints belong to several runs.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// What a user names as a checkpoint: `dir` itself when it holds a manifest, else (a checkpoint.dir)
// its latest complete checkpoint; a directory with neither is returned as is, for the manifest
// reader to name what is wrong (`loom ckpt`, `loom generate`).
std::string checkpoint_of(const std::string& dir);

// InputError when an output (--metrics, --trace, an export's --out) would be written inside a
// checkpoint folder: inside `checkpoint_dir` (this run's checkpoint.dir, "" none, whether it exists
// yet or not), or inside any directory that is a checkpoint (a `step-NNNNNNN` with a manifest.json)
// or a checkpoint.dir (a `latest` naming a step, or a complete step directory). loom owns what is
// there: an output could replace `latest` or another step's file.
void check_outside_checkpoints(const std::vector<PathUse>& outputs, const std::string& checkpoint_dir);

// Makes `dir` and a fresh `.partial` directory for `step` in it (removing a stale one); returns it.
std::string begin_partial(const std::string& dir, int64_t step);
// Syncs the partial directory, renames it to its step name (setting aside a complete checkpoint
// of the same step first, removed once the new one is in place), points `latest` at it and
// removes run `run`'s complete checkpoints beyond its newest `keep`, and stale partial ones. Error
// when the file system refuses; the previous latest checkpoint is untouched until the rename.
void commit_partial(const std::string& dir, int64_t step, int64_t keep, const std::string& run = "");

// Syncs a file or directory to the disk (directories: their entries).
void sync_path(const std::string& path);
// Writes `text` as the file `path` and syncs it.
void write_synced(const std::string& path, const std::string& text);

}  // namespace loom::ckpt
