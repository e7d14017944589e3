#pragma once
// `loom data prepare`: a text file as byte-level tokens (one id per byte, vocab 256), with the
// sidecar that states their width (NOTE [Token sidecar]).
#include "loom/core/output_file.h"
#include "loom/data/token_sidecar.h"

namespace loom::data {

// Writes the bytes of `text` as ids of `token_bytes` (2 or 4) little-endian bytes to `out`, and
// the sidecar to sidecar_path(out.path). Both go through OutputFile (NOTE [Output files]): on any
// failure neither file is replaced. InputError, before anything is written, when the text is
// missing, a directory or empty, when an output is a directory or the same file as the text
// (errors name the roles given), or when the disk lacks the space. Returns the sidecar written.
TokenSidecar write_byte_tokens(const PathUse& text, const PathUse& out, int token_bytes);

}  // namespace loom::data
