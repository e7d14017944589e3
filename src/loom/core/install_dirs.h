#pragma once
// Where loom finds the files it ships beside its code (the SentencePiece module, the cluster
// files) once installed: relative to the file that holds loom's code, which is libloom.so for a
// program linked to the installed library and the executable for the CLI.
#include <filesystem>

namespace loom {

// The directory of the file holding this code; empty when the system cannot say.
std::filesystem::path code_dir();

}  // namespace loom
