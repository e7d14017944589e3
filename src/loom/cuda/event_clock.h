#pragma once
// NOTE [Step clock] on a GPU: marks are CUDA events recorded on the rank's compute stream (the
// current stream of its GPU, where libtorch queues the layers' kernels). settle() records one
// more event, waits for it, reads the host clock, and places every mark that many milliseconds
// (cudaEventElapsedTime, about half a microsecond apart) before that moment. The events are made
// once and reused from step to step.
#include <memory>

#include "loom/core/step_clock.h"

namespace loom::cuda {

// The clock of a rank computing on `gpu`. Throws loom::Error where this build has no CUDA.
std::unique_ptr<StepClock> make_event_clock(int gpu);

}  // namespace loom::cuda
