// Collectives with closed-form answers over awkward sizes (0, 1, primes) and every world size
// the suite is launched with (1..8, including 3, 5, 7), for each supported dtype.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "loom/core/error.h"

#include "loom/dist/hierarchical.h"
#include "loom/dist/host_staging.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/dist/recording_communicator.h"
#include "loom/dist/topology.h"
#include "world.h"

namespace loom::dist {
namespace {

using test::world;

const std::vector<int64_t> kSizes{0, 1, 7, 13};
const std::vector<at::ScalarType> kTypes{at::kFloat, at::kDouble, at::kBFloat16, at::kLong};

// Values 0..n-1 as `type` (small integers: exact in every dtype, sums included).
at::Tensor iota(int64_t n, at::ScalarType type) { return at::arange(n, at::TensorOptions().dtype(at::kDouble)).to(type); }

// Exact, except that bfloat16 (8 significant bits) rounds sums past 256 at every partial sum.
void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const bool ok = got.scalar_type() == at::kBFloat16 ? at::allclose(g, w, 1.0 / 64, 0) : at::equal(g, w);
  EXPECT_TRUE(ok) << what << "\n got " << got << "\nwant " << want;
}

void all_reduce_cases(Communicator& c) {
  const int r = c.rank(), n = c.size();
  for (auto type : kTypes) {
    for (int64_t size : kSizes) {
      const std::string what = fmt::format("{} x {}", c10::toString(type), size);
      const at::Tensor base = iota(size, type) + 1;
      at::Tensor sum = base * (r + 1);
      c.all_reduce(sum, ReduceOp::Sum);
      expect_equal(sum, base * (n * (n + 1) / 2), "sum " + what);
      at::Tensor max = base * (r + 1);
      c.all_reduce(max, ReduceOp::Max);
      expect_equal(max, base * n, "max " + what);
      if (type != at::kLong) {
        at::Tensor avg = (base * (2 * r + 1)).to(type);  // mean of 1, 3, ..., 2n-1 is n
        c.all_reduce(avg, ReduceOp::Avg);
        expect_equal(avg, base * n, "avg " + what);
      }
    }
  }
}

void scatter_gather_cases(Communicator& c) {
  const int r = c.rank(), n = c.size();
  for (auto type : kTypes) {
    for (int64_t block : kSizes) {
      const std::string what = fmt::format("{} x {}", c10::toString(type), block);
      // Block b of rank r's input holds r + 100 b + j; the sum over ranks lands on rank b.
      at::Tensor input = at::empty({n * block}, at::TensorOptions().dtype(type));
      for (int b = 0; b < n; ++b) input.narrow(0, b * block, block).copy_(iota(block, type) + (r + 100 * b));
      at::Tensor out = at::empty({block}, input.options());
      c.reduce_scatter(input, out, ReduceOp::Sum);
      expect_equal(out, (iota(block, at::kDouble) + 100 * r) * n + n * (n - 1) / 2, "reduce_scatter " + what);

      at::Tensor mine = iota(block, type) + 10 * r;
      at::Tensor gathered = at::empty({n * block}, mine.options());
      c.all_gather(mine, gathered);
      for (int b = 0; b < n; ++b)
        expect_equal(gathered.narrow(0, b * block, block), iota(block, at::kDouble) + 10 * b, "all_gather " + what);
    }
  }
}

void all_to_all_cases(Communicator& c) {
  const int r = c.rank(), n = c.size();
  for (int64_t block : kSizes) {
    at::Tensor input = at::empty({n * block}, at::kDouble), out = at::empty({n * block}, at::kDouble);
    for (int b = 0; b < n; ++b) input.narrow(0, b * block, block).copy_(iota(block, at::kDouble) + 1000 * r + 10 * b);
    c.all_to_all(input, out);
    for (int b = 0; b < n; ++b)
      expect_equal(out.narrow(0, b * block, block), iota(block, at::kDouble) + 1000 * b + 10 * r, "all_to_all");
  }
  // Rank r sends (r + d) % 3 elements valued 100 r + d to rank d: some blocks are empty.
  std::vector<int64_t> send(n), recv(n);
  std::vector<double> values;
  for (int d = 0; d < n; ++d) {
    send[d] = (r + d) % 3, recv[d] = (d + r) % 3;
    for (int64_t i = 0; i < send[d]; ++i) values.push_back(100.0 * r + d);
  }
  at::Tensor input = at::tensor(values, at::kDouble);
  at::Tensor out = at::full({std::accumulate(recv.begin(), recv.end(), int64_t{0})}, -1.0, at::kDouble);
  c.all_to_allv(input, send, out, recv);
  int64_t at_ = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < recv[s]; ++i) EXPECT_EQ(out[at_++].item<double>(), 100.0 * s + r) << "from " << s;
}

void broadcast_ring_cases(Communicator& c) {
  const int r = c.rank(), n = c.size();
  at::Tensor t = r == n - 1 ? iota(13, at::kFloat) * 3 : at::zeros({13}, at::kFloat);
  c.broadcast(t, n - 1);
  expect_equal(t, iota(13, at::kDouble) * 3, "broadcast");
  if (n == 1) return;
  at::Tensor out = at::full({7}, static_cast<double>(r), at::kDouble), in = at::empty({7}, at::kDouble);
  auto recv = c.recv_async(in, (r + n - 1) % n, 5);
  auto sent = c.send_async(out, (r + 1) % n, 5);
  recv->wait();
  sent->wait();
  expect_equal(in, at::full({7}, static_cast<double>((r + n - 1) % n), at::kDouble), "ring");
  c.barrier();
}

void any_wait_order_cases(Communicator& c) {
  const int n = c.size();
  at::Tensor a = at::ones({1 << 16}, at::kFloat), b = at::full({5}, 2.0, at::kDouble);
  auto wa = c.all_reduce_async(a, ReduceOp::Sum);
  auto wb = c.all_reduce_async(b, ReduceOp::Sum);
  while (!wb->test()) {
  }
  wa->wait();
  wa->wait();  // idempotent
  expect_equal(a, at::full({1 << 16}, static_cast<double>(n), at::kDouble), "a");
  expect_equal(b, at::full({5}, 2.0 * n, at::kDouble), "b");
}

// NOTE [Pair all-reduce]: a group of 2's non-blocking all-reduce equals its blocking one (MPI's) bit
// for bit, on both ranks, for every dtype and op, over values whose sums round.
TEST(Collectives, PairAllReduceWithoutBlockingEqualsTheBlockingOneBitForBit) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "2 ranks or more";
  const int pairs = w.size() / 2;
  const bool paired = w.rank() < 2 * pairs;
  const std::unique_ptr<Communicator> pair = w.split(paired ? w.rank() / 2 : pairs, w.rank(), "pair");
  if (!paired) return;
  ASSERT_EQ(pair->size(), 2);
  for (auto type : kTypes) {
    for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{13}, (int64_t{1} << 16) + 3}) {
      const at::Tensor x = iota(size, at::kDouble);
      const at::Tensor mine = type == at::kLong ? (x * (w.rank() + 3)).to(type) : (x * 0.37 + 1.1 * w.rank()).sin().to(type);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        if (op == ReduceOp::Avg && type == at::kLong) continue;
        const std::string what = fmt::format("{} x {}, op {}", c10::toString(type), size, static_cast<int>(op));
        at::Tensor async = mine.clone(), blocking = mine.clone();
        pair->all_reduce_async(async, op)->wait();
        pair->all_reduce(blocking, op);
        EXPECT_TRUE(at::equal(async, blocking)) << what;
        at::Tensor both = at::empty({2 * size}, async.options());
        pair->all_gather(async, both);
        EXPECT_TRUE(at::equal(both.narrow(0, 0, size), both.narrow(0, size, size))) << what;
      }
    }
  }
}

TEST(Collectives, AllReduceSumAvgMax) { all_reduce_cases(world()); }
TEST(Collectives, ReduceScatterAndAllGather) { scatter_gather_cases(world()); }
TEST(Collectives, AllToAllAndAllToAllV) { all_to_all_cases(world()); }
TEST(Collectives, BroadcastAndRingSendRecv) { broadcast_ring_cases(world()); }
TEST(Collectives, NonBlockingOperationsCompleteInAnyWaitOrder) { any_wait_order_cases(world()); }

// NOTE [Host staging]: the same closed forms through host copies of every tensor, as a device
// tensor's operations take them.
void through_host_staging(void (*cases)(Communicator&)) {
  HostStagingCommunicator staged(world(), /*always=*/true);
  cases(staged);
}
// NOTE [Hierarchical all-reduce] on one machine: the world's ranks taken as hosts of 2 (ranks 0 and
// 1, 2 and 3, ...), against the closed forms; several under way at once, a blocking one among
// them, finished newest first, so that the ranks' steps must keep one order; uneven hosts get no
// levels. Pieces of 4 KiB: the larger tensors go through the steps in many, the last one short.
TEST(Collectives, HierarchicalAllReduceAsOnHostsOfTwo) {
  Communicator& w = world();
  const int r = w.rank(), n = w.size();
  if (n < 4 || n % 2 != 0) GTEST_SKIP() << "2 hosts of 2 ranks or more";
  const std::shared_ptr<HostLevels> levels = host_levels(w, r / 2 * 2, /*piece_bytes=*/4096);
  ASSERT_NE(levels, nullptr);
  EXPECT_EQ(levels->node->size(), 2);
  EXPECT_EQ(levels->cross != nullptr, r % 2 == 0);  // the hosts' leaders
  if (levels->cross) EXPECT_EQ(levels->cross->size(), n / 2);
  for (auto type : kTypes) {
    for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{13}, int64_t{1000}, (int64_t{1} << 16) + 3}) {
      const std::string what = fmt::format("{} x {}", c10::toString(type), size);
      const at::Tensor base = iota(size, type).remainder(50) + 1;
      at::Tensor sum = base * (r + 1);
      hierarchical_all_reduce(levels, sum, ReduceOp::Sum);
      expect_equal(sum, base * (n * (n + 1) / 2), "sum " + what);
      at::Tensor max = base * (r + 1);
      hierarchical_all_reduce(levels, max, ReduceOp::Max);
      expect_equal(max, base * n, "max " + what);
      if (type == at::kLong) continue;
      at::Tensor avg = (base * (2 * r + 1)).to(type);
      hierarchical_all_reduce(levels, avg, ReduceOp::Avg);
      expect_equal(avg, base * n, "avg " + what);
    }
  }
  at::Tensor a = at::ones({(1 << 16) + 1}, at::kFloat), b = at::full({2, 5}, 2.0, at::kDouble);
  at::Tensor c = at::full({3}, 1, at::kLong);
  auto wa = hierarchical_all_reduce_async(levels, a, ReduceOp::Sum);
  auto wb = hierarchical_all_reduce_async(levels, b, ReduceOp::Avg);
  at::Tensor d = at::full({9}, static_cast<double>(r), at::kDouble);
  hierarchical_all_reduce(levels, d, ReduceOp::Max);  // blocking, behind the two under way
  expect_equal(d, at::full({9}, n - 1.0, at::kDouble), "d");
  auto wc = hierarchical_all_reduce_async(levels, c, ReduceOp::Sum);
  while (!wc->test()) {
  }
  wb->wait();
  wa->wait();
  wa->wait();  // idempotent
  expect_equal(a, at::full({(1 << 16) + 1}, static_cast<double>(n), at::kDouble), "a");
  expect_equal(b, at::full({2, 5}, 2.0, at::kDouble), "b");
  expect_equal(c, at::full({3}, static_cast<double>(n), at::kDouble), "c");
  EXPECT_EQ(host_levels(w, r == 0 ? 0 : 1), nullptr);  // 1 rank and n - 1
}

// One rank's side of the levels' three communicators: each all-reduce or broadcast finishes when
// the test says so, or when waited on; `posted` holds each one's first element's address and state.
class ManualCommunicator final : public Communicator {
 public:
  struct Posted {
    const void* data;
    std::shared_ptr<bool> done;
  };
  std::vector<Posted> posted;

  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& axis() const override { return axis_; }
  WorkPtr all_reduce_async(at::Tensor& t, ReduceOp) override { return post(t); }
  WorkPtr broadcast_async(at::Tensor& t, int) override { return post(t); }
  WorkPtr reduce_scatter_async(const at::Tensor&, at::Tensor&, ReduceOp) override { return unused(); }
  WorkPtr all_gather_async(const at::Tensor&, at::Tensor&) override { return unused(); }
  WorkPtr all_to_all_async(const at::Tensor&, at::Tensor&) override { return unused(); }
  WorkPtr all_to_allv_async(const at::Tensor&, const std::vector<int64_t>&, at::Tensor&,
                            const std::vector<int64_t>&) override {
    return unused();
  }
  WorkPtr send_async(const at::Tensor&, int, int) override { return unused(); }
  WorkPtr recv_async(at::Tensor&, int, int) override { return unused(); }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int, const std::string&) override { throw std::logic_error("split"); }

 private:
  class ManualWork final : public Work {
   public:
    explicit ManualWork(std::shared_ptr<bool> done) : done_(std::move(done)) {}
    void wait() override { *done_ = true; }
    bool test() override { return *done_; }

   private:
    std::shared_ptr<bool> done_;
  };
  WorkPtr post(const at::Tensor& t) {
    posted.push_back({t.data_ptr(), std::make_shared<bool>(false)});
    return std::make_unique<ManualWork>(posted.back().done);
  }
  static WorkPtr unused() { throw std::logic_error("not a step of the levels"); }
  std::string axis_ = "manual";
};

// NOTE [Hierarchical all-reduce]'s order, on a leader whose steps finish when the test says: a
// piece crosses the hosts only after the piece before it has, whatever order their steps end in;
// a wait with the first piece done and the next held back within the host waits on that one; an
// average is divided once, by the group's size.
TEST(Collectives, HierarchicalPiecesKeepTheirOrderOnEachCommunicator) {
  auto levels = std::make_shared<HostLevels>();
  auto node = std::make_unique<ManualCommunicator>(), share = std::make_unique<ManualCommunicator>(),
       cross = std::make_unique<ManualCommunicator>();
  ManualCommunicator &within = *node, &broadcast = *share, &across = *cross;
  levels->node = std::move(node), levels->node_share = std::move(share), levels->cross = std::move(cross);
  levels->size = 4;
  levels->piece_bytes = 8;  // two floats: a tensor of 5 goes in 3 pieces, the last one short
  at::Tensor t = at::full({5}, 8.0f);
  const WorkPtr work = hierarchical_all_reduce_async(levels, t, ReduceOp::Avg);
  ASSERT_EQ(within.posted.size(), 3u);  // every piece's first step at once
  const std::vector<const void*> pieces{t.data_ptr<float>(), t.data_ptr<float>() + 2, t.data_ptr<float>() + 4};
  *within.posted[1].done = true;  // the second piece's first step ends first: it waits for the first
  EXPECT_FALSE(work->test());
  EXPECT_TRUE(across.posted.empty());
  *within.posted[0].done = true;
  EXPECT_FALSE(work->test());
  ASSERT_EQ(across.posted.size(), 2u);
  EXPECT_EQ(across.posted[0].data, pieces[0]);
  EXPECT_EQ(across.posted[1].data, pieces[1]);
  *across.posted[0].done = true;
  EXPECT_FALSE(work->test());
  ASSERT_EQ(broadcast.posted.size(), 1u);
  *broadcast.posted[0].done = true;
  EXPECT_FALSE(work->test());  // the first piece done; the third still within its host
  EXPECT_EQ(t[0].item<float>(), 2.0f);
  EXPECT_EQ(t[2].item<float>(), 8.0f);
  work->wait();  // waits on the held-back steps in order
  ASSERT_EQ(across.posted.size(), 3u);
  EXPECT_EQ(across.posted[2].data, pieces[2]);
  ASSERT_EQ(broadcast.posted.size(), 3u);
  EXPECT_EQ(broadcast.posted[1].data, pieces[1]);
  EXPECT_EQ(broadcast.posted[2].data, pieces[2]);
  EXPECT_TRUE(work->test());
  EXPECT_TRUE(at::equal(t, at::full({5}, 2.0f)));
}

TEST(HostStaging, AllReduceSumAvgMax) { through_host_staging(all_reduce_cases); }
TEST(HostStaging, ReduceScatterAndAllGather) { through_host_staging(scatter_gather_cases); }
TEST(HostStaging, AllToAllAndAllToAllV) { through_host_staging(all_to_all_cases); }
TEST(HostStaging, BroadcastAndRingSendRecv) { through_host_staging(broadcast_ring_cases); }
TEST(HostStaging, NonBlockingOperationsCompleteInAnyWaitOrder) { through_host_staging(any_wait_order_cases); }

TEST(Mesh, AxesSplitTheWorldWithTpInnermost) {
  const int n = world().size();
  // Use every factorisation into dp x pp x sp x tp with tp and sp from {1, 2} that fits.
  for (int tp : {1, 2})
    for (int sp : {1, 2}) {
      if (n % (tp * sp) != 0) continue;
      const MeshShape shape = MeshDegrees{n / (tp * sp), 1, sp, tp};
      Mesh mesh(world(), shape);
      EXPECT_EQ(mesh.tp().size(), tp);
      EXPECT_EQ(mesh.sp().size(), sp);
      EXPECT_EQ(mesh.dp().size(), n / (tp * sp));
      EXPECT_EQ(mesh.dp_sp().size(), n / tp);
      EXPECT_EQ(mesh.rank(), (mesh.dp_rank() * sp + mesh.sp_rank()) * tp + mesh.tp_rank());
      // NOTE [Hosts in the mesh]: one machine, named by its lowest rank; no group spans two.
      EXPECT_EQ(mesh.tp().host(), 0);
      EXPECT_EQ(host_span_warning(mesh), "");
      // Sum of world ranks over each axis group, in closed form.
      at::Tensor t = at::full({1}, static_cast<int64_t>(mesh.rank()), at::kLong);
      mesh.tp().all_reduce(t);
      const int64_t first = mesh.rank() - mesh.tp_rank();
      EXPECT_EQ(t.item<int64_t>(), tp * first + tp * (tp - 1) / 2);
      at::Tensor u = at::full({1}, static_cast<int64_t>(mesh.dp_rank()), at::kLong);
      mesh.dp().all_reduce(u);
      EXPECT_EQ(u.item<int64_t>(), shape.dp() * (shape.dp() - 1) / 2);
    }
}

// NOTE [Mesh axes]: every group follows from axis names. Here against the groups written out by
// hand (what the mesh split before), for every rank of shapes with odd sizes; each group of a set
// of axes has the product of their sizes as ranks, its keys 0, 1, ... once each.
TEST(Mesh, GroupsFollowFromTheAxisNames) {
  for (const MeshShape s : {MeshDegrees{2, 3, 2, 2}, MeshDegrees{3, 1, 2, 5}, MeshDegrees{1, 4, 1, 1}, MeshDegrees{}}) {
    const int dp = s.dp(), pp = s.pp(), sp = s.sp(), tp = s.tp();
    SCOPED_TRACE(fmt::format("dp {} pp {} sp {} tp {}", dp, pp, sp, tp));
    std::map<int, std::set<int>> dp_sp_groups;
    for (int r = 0; r < s.ranks(); ++r) {
      const MeshCoords c = mesh_coords(s, r);
      EXPECT_EQ(r, ((c.dp * pp + c.pp) * sp + c.sp) * tp + c.tp);
      EXPECT_EQ(group_place(s, r, {"dp"}), (GroupPlace{(c.pp * sp + c.sp) * tp + c.tp, c.dp}));
      EXPECT_EQ(group_place(s, r, {"pp"}), (GroupPlace{(c.dp * sp + c.sp) * tp + c.tp, c.pp}));
      EXPECT_EQ(group_place(s, r, {"sp"}), (GroupPlace{(c.dp * pp + c.pp) * tp + c.tp, c.sp}));
      EXPECT_EQ(group_place(s, r, {"tp"}), (GroupPlace{(c.dp * pp + c.pp) * sp + c.sp, c.tp}));
      const GroupPlace dp_sp = group_place(s, r, {"dp", "sp"});
      EXPECT_EQ(dp_sp, (GroupPlace{c.pp * tp + c.tp, c.dp * sp + c.sp}));
      EXPECT_EQ(group_place(s, r, {"sp", "dp"}), dp_sp) << "the mesh's order of the axes counts, not the caller's";
      EXPECT_TRUE(dp_sp_groups[dp_sp.color].insert(dp_sp.key).second) << "rank " << r << ": a key taken twice";
    }
    EXPECT_EQ(static_cast<int>(dp_sp_groups.size()), pp * tp);
    for (const auto& [color, keys] : dp_sp_groups) {
      EXPECT_EQ(static_cast<int>(keys.size()), dp * sp) << "group " << color;
      EXPECT_EQ(*keys.rbegin(), dp * sp - 1) << "group " << color;
    }
  }
  EXPECT_THROW(group_place(MeshShape{}, 0, {"ep"}), Error);
}

// NOTE [Mesh axes]: room for more. A fifth axis (an expert axis inside dp) is one more entry: its
// stride, coordinates and groups follow from the list, and the four axes keep their meaning.
TEST(Mesh, AnAxisMoreIsAnEntryInTheList) {
  const MeshShape s({{"dp", 2}, {"ep", 3}, {"pp", 1}, {"sp", 1}, {"tp", 2}});
  EXPECT_EQ(s.ranks(), 12);
  EXPECT_EQ(s.stride("tp"), 1);
  EXPECT_EQ(s.stride("ep"), 2);
  EXPECT_EQ(s.stride("dp"), 6);
  EXPECT_EQ(s.size("ep"), 3);
  EXPECT_EQ(s.size("zz"), 1);  // an axis it does not hold has one rank
  for (int r = 0; r < s.ranks(); ++r) {
    const int dp = r / 6, ep = r / 2 % 3, tp = r % 2;
    EXPECT_EQ(s.coordinate(r, "ep"), ep);
    EXPECT_EQ(s.coordinate(r, "zz"), 0);
    EXPECT_EQ(mesh_coords(s, r).dp, dp);
    EXPECT_EQ(group_place(s, r, {"ep"}), (GroupPlace{dp * 2 + tp, ep}));
    EXPECT_EQ(group_place(s, r, {"dp", "ep"}), (GroupPlace{tp, dp * 3 + ep}));
    EXPECT_EQ(group_place(s, r, {"dp"}), (GroupPlace{ep * 2 + tp, dp}));
  }
  EXPECT_EQ(MeshShape(MeshDegrees{.dp = 2, .tp = 3}), MeshShape({{"dp", 2}, {"pp", 1}, {"sp", 1}, {"tp", 3}}));
  EXPECT_THROW(MeshShape({{"dp", 2}, {"dp", 2}}), Error);
  EXPECT_THROW(MeshShape({{"dp", 0}}), Error);
  EXPECT_THROW(MeshShape({{"", 2}}), Error);
}

TEST(Mesh, RefusesAShapeThatDoesNotFitTheWorld) {
  try {
    check_mesh_shape(MeshDegrees{2, 1, 1, 3}, 4);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dp (2) x pp (1) x sp (1) x tp (3) = 6 ranks, but the job has 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(RecordingCommunicator, CountsOperationsAndBytesByAxis) {
  if (world().size() == 1) GTEST_SKIP() << "a communicator of one rank moves nothing to record";
  CommStats stats;
  RecordingCommunicator comm(world(), stats);
  at::Tensor t = at::zeros({10}, at::kFloat);
  comm.all_reduce(t);
  comm.all_reduce(t);
  at::Tensor out = at::zeros({10 * world().size()}, at::kFloat);
  comm.all_gather(t, out);
  EXPECT_EQ(stats.count("all_reduce", "world"), 2);
  EXPECT_EQ(stats.count("all_gather", "world"), 1);
  EXPECT_EQ(stats.bytes_by_axis().at("world"), 120);
}

// A race planted for the ThreadSanitizer build (NOTE [MPI under ThreadSanitizer]): another thread
// writes a send's buffer while the send is pending, with nothing ordering the write with the
// send's completion. tests/sanitizers/planted_race.sh runs it there and expects the report; it is
// disabled everywhere else, where it would be a real data race.
TEST(Collectives, DISABLED_PlantedRaceBufferWrittenDuringSend) {
  if (world().size() != 2) GTEST_SKIP() << "two ranks";
  at::Tensor buffer = at::ones({256}, at::TensorOptions().dtype(at::kFloat));
  if (world().rank() == 1) {
    world().recv_async(buffer, 0, 5)->wait();
    return;
  }
  WorkPtr send = world().send_async(buffer, 1, 5);
  float* values = buffer.data_ptr<float>();
  std::thread writer([values] {
    for (int i = 0; i < 256; ++i) values[i] = 2.0F;  // the planted write
  });
  send->wait();
  writer.join();
}

}  // namespace
}  // namespace loom::dist
