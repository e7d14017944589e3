#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "loom/core/blas_kernel.h"

int main(int argc, char** argv) {
  loom::select_blas_kernel(argv);  // NOTE [BLAS kernel]: before anything loads or starts MPI
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);  // ctest runs two test processes at once on two cores
  return RUN_ALL_TESTS();
}
