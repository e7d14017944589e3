#include "loom/memory/swap.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

#include "loom/core/error.h"
#include "loom/core/sanitizer.h"
#include "loom/core/units.h"
#include "loom/memory/accounting_allocator.h"

namespace loom::memory {
namespace {

// The CPU build's host tier: blocks from the C heap, counted on their own (the accounting
// allocator counts the budgeted "device" memory), released by the tensor's deleter.
class HostTier final : public SwapTier {
 public:
  at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) override {
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    const auto bytes = static_cast<size_t>(numel) * at::elementSize(dtype);
    void* data = nullptr;
    if (posix_memalign(&data, 64, std::max<size_t>(bytes, 1)) != 0)
      throw OutOfMemory(fmt::format("out of host memory for the swap tier allocating {}",
                                    format_bytes(static_cast<double>(bytes))));
    const auto n = static_cast<int64_t>(bytes);
    const int64_t now = live_.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    auto release = [this, n](void* p) {
      sanitizer::acquire(p);  // NOTE [Orderings ThreadSanitizer cannot see]
      std::free(p);
      live_.fetch_sub(n, std::memory_order_relaxed);
    };
    return at::from_blob(data, sizes, release, at::TensorOptions().dtype(dtype));
  }
  at::Tensor device_empty(at::IntArrayRef sizes, at::ScalarType dtype) override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype));
  }
  void copy(const at::Tensor& dst, const at::Tensor& src) override {
    LOOM_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(),
               "[swap] a copy of {} bytes into {} bytes", src.nbytes(), dst.nbytes());
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  }
  int64_t host_live_bytes() const override { return live_.load(std::memory_order_relaxed); }
  int64_t host_peak_bytes() const override { return peak_.load(std::memory_order_relaxed); }
  void reset_host_peak() override { peak_.store(host_live_bytes(), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace

std::unique_ptr<SwapTier> make_host_tier() { return std::make_unique<HostTier>(); }

Swapper::Swapper(SwapTier& tier) : tier_(tier), thread_([this] { loop(); }) {}

Swapper::~Swapper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

namespace {

// A storage travels whole unless the views into it cover less than half of it (a slice of a
// buffer the layer does not own): then each view travels alone, as a contiguous copy.
constexpr int64_t kWholeStorageFactor = 2;

// A byte tensor over the whole storage, on the storage's device (a tensor is set only to a storage
// of its own device).
at::Tensor bytes_of(const at::Storage& storage) {
  return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()))
      .set_(storage, 0, {static_cast<int64_t>(storage.nbytes())}, {1});
}

}  // namespace

SwapTicket Swapper::swap_out(std::vector<at::Tensor> tensors) {
  auto job = std::make_shared<SwapJob>();
  std::map<const void*, int64_t> viewed;  // per storage: the bytes of the views into it
  for (const at::Tensor& t : tensors) viewed[t.storage().data()] += static_cast<int64_t>(t.nbytes());
  std::vector<const void*> seen;  // each block's storage
  for (at::Tensor& t : tensors) {
    SwapView view{.offset = t.storage_offset(), .sizes = t.sizes().vec(), .strides = t.strides().vec(),
                  .dtype = t.scalar_type()};
    const at::Storage& storage = t.storage();
    const bool whole = static_cast<int64_t>(storage.nbytes()) <= kWholeStorageFactor * viewed[storage.data()];
    const auto found = std::find(seen.begin(), seen.end(), storage.data());
    if (whole && found != seen.end()) {
      view.block = static_cast<size_t>(found - seen.begin());
    } else {
      at::Tensor block;
      if (whole) {
        block = bytes_of(storage);
      } else {  // a copy of the view alone (clone: a contiguous view would share the storage)
        const at::Tensor alone = t.clone(at::MemoryFormat::Contiguous);
        block = bytes_of(alone.storage());
        view.offset = 0, view.strides = alone.strides().vec();
      }
      view.block = job->device.size();
      seen.push_back(whole ? storage.data() : nullptr);
      job->device.push_back(std::move(block));
    }
    job->views.push_back(std::move(view));
  }
  queue({job, true});
  return job;
}

void Swapper::swap_in(const SwapTicket& ticket) {
  {
    std::lock_guard lock(mutex_);
    if (ticket->in_queued) return;
    ticket->in_queued = true;
  }
  queue({ticket, false});
}

std::vector<at::Tensor> Swapper::take(const SwapTicket& ticket) {
  swap_in(ticket);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return ticket->in_done; });
  }
  if (ticket->failure) std::rethrow_exception(ticket->failure);
  std::vector<at::Tensor> out;
  for (const SwapView& v : ticket->views) {
    const at::Tensor& block = ticket->device[v.block];
    out.push_back(at::empty({0}, at::TensorOptions().dtype(v.dtype).device(block.device()))
                      .set_(block.storage(), v.offset, v.sizes, v.strides));
  }
  ticket->device.clear();  // the views hold the blocks now
  return out;
}

void Swapper::wait_out(const SwapTicket& ticket) {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return ticket->out_done; });
}

void Swapper::drain() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return tasks_.empty() && !busy_; });
}

void Swapper::queue(Task task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_all();
}

void Swapper::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping with nothing left
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    run(task);
    lock.lock();
    busy_ = false;
    (task.out ? task.job->out_done : task.job->in_done) = true;
    done_.notify_all();
  }
}

namespace {

// The copy thread's references to `tensors` go; whichever thread drops a storage's last one frees
// it, after these reads (NOTE [Orderings ThreadSanitizer cannot see]).
void drop_references(std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) sanitizer::release(t.storage().data());
  tensors.clear();
}

}  // namespace

// One direction of one job, on the copy thread. The job's fields are touched by the caller only
// before it is queued and after take() saw it done.
void Swapper::run(Task& task) {
  SwapJob& job = *task.job;
  try {
    if (job.failure) return;  // the copy out failed: nothing to bring back
    if (task.out) {
      job.out_start = Clock::now();
      for (const at::Tensor& t : job.device) {
        job.host.push_back(tier_.host_empty(t.sizes(), t.scalar_type()));
        tier_.copy(job.host.back(), t);
      }
      drop_references(job.device);  // releases the budgeted memory, unless the caller still holds it
      job.out_end = Clock::now();
    } else {
      job.in_start = Clock::now();
      for (const at::Tensor& h : job.host) {
        job.device.push_back(tier_.device_empty(h.sizes(), h.scalar_type()));
        tier_.copy(job.device.back(), h);
      }
      drop_references(job.host);
      job.in_end = Clock::now();
    }
  } catch (...) {
    job.failure = std::current_exception();
  }
}

}  // namespace loom::memory
