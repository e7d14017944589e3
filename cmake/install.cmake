# `cmake --install BUILD --prefix P` (`make install PREFIX=P`; docs/cpp-api.md): the shared library
# and the SentencePiece module in P/lib, the public headers in P/include/loom, the CLI in P/bin,
# the cluster files in P/share/loom/clusters, and the CMake package in P/lib/cmake/loom, whose
# loom::loom carries libtorch's and fmt's usage requirements. The layout is fixed (lib, not a
# multiarch directory): the library and the CLI find what they ship relative to themselves.
include(CMakePackageConfigHelpers)

# The public surface: loom/loom.h and every header it includes, and nothing else, so a header
# outside it cannot be included from an installed tree. tests/install/install.sh checks that each
# installed header's loom includes are installed too.
set(LOOM_PUBLIC_HEADERS
  loom.h version.h
  core/config.h core/error.h core/options.h core/mesh_placement.h core/rng.h
  dist/communicator.h dist/device_backend.h dist/interrupt.h dist/null_communicator.h mpi/runtime.h
  nn/chain.h nn/decode.h nn/gradient_check.h nn/layer.h nn/layer_norm.h nn/param.h nn/precision.h nn/products.h nn/rms_norm.h
  data/batches.h
  parallel/sequence_parallel.h parallel/tp_region.h
  blocks/block_norm.h blocks/embedding.h blocks/final_norm.h blocks/lm_head_loss.h
  models/decoder_kind.h models/model.h models/registry.h
  train/equivalence.h
  api/program.h api/training.h)
foreach(header IN LISTS LOOM_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES src/loom/${header} DESTINATION include/loom/${dir})
endforeach()

install(TARGETS loom_shared LIBRARY DESTINATION lib)
install(TARGETS loom_sentencepiece LIBRARY DESTINATION lib)
install(TARGETS loom_cli RUNTIME DESTINATION bin)
install(DIRECTORY clusters/ DESTINATION share/loom/clusters FILES_MATCHING PATTERN "*.toml")

configure_file(cmake/loomConfig.cmake.in ${PROJECT_BINARY_DIR}/loomConfig.cmake @ONLY)
# 0.x: the API may change between minor versions, so a request for 0.2 accepts 0.2.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/loomConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/loomConfig.cmake ${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
        DESTINATION lib/cmake/loom)
