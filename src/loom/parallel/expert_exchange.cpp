#include "loom/parallel/expert_exchange.h"

#include "loom/core/error.h"

namespace loom::parallel {

ExpertExchange::ExpertExchange(dist::Communicator& ep, const std::vector<int64_t>& counts) : ep_(ep) {
  const int64_t ranks = ep.size(), experts = static_cast<int64_t>(counts.size()), local = experts / ranks;
  LOOM_CHECK(experts % ranks == 0, "[experts] {} experts over an expert group of {} ranks", experts, ranks);
  // 1. Every rank learns how many rows each rank sends for each of its experts.
  const at::Tensor mine = at::tensor(counts, at::kLong);  // [ranks x local]: rank r's experts are block r
  at::Tensor theirs = at::empty({experts}, at::kLong);
  ep.all_to_all(mine, theirs);
  const at::Tensor from = theirs.view({ranks, local});  // [source, local expert]
  const auto f = from.accessor<int64_t, 2>();
  send_rows_.assign(static_cast<size_t>(ranks), 0);
  recv_rows_.assign(static_cast<size_t>(ranks), 0);
  local_counts_.assign(static_cast<size_t>(local), 0);
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < local; ++i) {
      send_rows_[static_cast<size_t>(r)] += counts[static_cast<size_t>(r * local + i)];
      recv_rows_[static_cast<size_t>(r)] += f[r][i];
      local_counts_[static_cast<size_t>(i)] += f[r][i];
    }
  for (int64_t r = 0; r < ranks; ++r) sent_ += send_rows_[static_cast<size_t>(r)], received_ += recv_rows_[static_cast<size_t>(r)];
  // Arrivals are source-major (then expert within a source); the experts want expert-major (then
  // source): the arrival index of each expert-major row.
  std::vector<int64_t> start(static_cast<size_t>(ranks * local), 0);  // arrival offset of (source, expert)
  int64_t at = 0;
  for (int64_t s = 0; s < ranks; ++s)
    for (int64_t i = 0; i < local; ++i) start[static_cast<size_t>(s * local + i)] = at, at += f[s][i];
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(received_));
  for (int64_t i = 0; i < local; ++i)
    for (int64_t s = 0; s < ranks; ++s)
      for (int64_t k = 0; k < f[s][i]; ++k) order.push_back(start[static_cast<size_t>(s * local + i)] + k);
  order_ = at::tensor(order, at::kLong);
}

at::Tensor ExpertExchange::exchange(const at::Tensor& rows, const std::vector<int64_t>& send,
                                    const std::vector<int64_t>& recv, int64_t out_rows) const {
  const int64_t width = rows.size(1);
  std::vector<int64_t> send_elements, recv_elements;
  for (int64_t n : send) send_elements.push_back(n * width);
  for (int64_t n : recv) recv_elements.push_back(n * width);
  at::Tensor out = at::empty({out_rows, width}, rows.options());
  ep_.all_to_allv(rows.contiguous().view({-1}), send_elements, out, recv_elements);
  return out;
}

at::Tensor ExpertExchange::dispatch(const at::Tensor& rows) const {
  LOOM_CHECK(rows.size(0) == sent_, "[experts] {} rows to dispatch, {} counted", rows.size(0), sent_);
  return exchange(rows, send_rows_, recv_rows_, received_).index_select(0, order_.to(rows.device()));
}

at::Tensor ExpertExchange::combine(const at::Tensor& rows) const {
  LOOM_CHECK(rows.size(0) == received_, "[experts] {} rows to combine, {} received", rows.size(0), received_);
  at::Tensor arrival = at::empty_like(rows);
  arrival.index_copy_(0, order_.to(rows.device()), rows);
  return exchange(arrival, recv_rows_, send_rows_, sent_);
}

}  // namespace loom::parallel
