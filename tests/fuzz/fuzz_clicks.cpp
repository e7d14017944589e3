// Click files of the DLRM (data/clicks.h, clicks:PATH): opened with the checks of the whole file,
// then read as micro-batches.
// Input: a line "TABLES BAG_SIZE DENSE_FEATURES TABLE_ROWS" (each clamped to a small valid range; a
// line that does not read leaves 2 1 3 100), then the file's bytes.
// Contract (NOTE [Reader contract]) plus: every label of a micro-batch is 0 or 1 and every id a row
// of its table.
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_util.h"
#include "loom/core/config.h"
#include "loom/data/clicks.h"

namespace {

int64_t clamp(int64_t v, int64_t lo, int64_t hi, int64_t otherwise) { return v >= lo && v <= hi ? v : otherwise; }

void check(std::string_view input) {
  const size_t nl = input.find('\n');
  std::istringstream in{std::string(input.substr(0, nl))};
  int64_t tables = 2, bag = 1, dense = 3, rows = 100;
  in >> tables >> bag >> dense >> rows;
  input.remove_prefix(nl == std::string_view::npos ? input.size() : nl + 1);
  loom::Config config;
  config.model.kind = "dlrm";
  config.model.tables = clamp(tables, 1, 8, 2);
  config.model.bag_size = clamp(bag, 1, 4, 1);
  config.model.dense_features = clamp(dense, 1, 16, 3);  // the model refuses 0
  config.model.table_rows = clamp(rows, 1, int64_t{1} << 40, 100);
  config.data.source = "clicks:" + loom::fuzz::Scratch::write("clicks", input);
  const auto clicks = loom::data::open_clicks(config);
  for (int64_t step : {0, 1, 1000003}) {
    const loom::nn::MicroBatch mb = clicks->microbatch(8, 4, step, 1);
    const at::Tensor labels = mb.targets, ids = mb.tokens;
    loom::fuzz::require(((labels == 0) | (labels == 1)).all().item<bool>(), "a label is not 0 or 1");
    loom::fuzz::require(ids.size(1) == config.model.tables * config.model.bag_size, "a sample's id count is wrong");
    loom::fuzz::require((ids >= 0).all().item<bool>() && (ids < config.model.table_rows).all().item<bool>(),
                        "an id is not a row of its table");
    loom::fuzz::require(mb.dense.size(1) == config.model.dense_features, "a sample's dense width is wrong");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_contract([&] { check(loom::fuzz::text_of(data, size)); });
  return 0;
}
