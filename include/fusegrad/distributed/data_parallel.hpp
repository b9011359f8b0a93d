#pragma once
/// \file fusegrad/distributed/data_parallel.hpp
/// `distributed::data_parallel`: PyTorch's DistributedDataParallel on MPI. Every rank holds the
/// same parameters (broadcast from rank 0 at construction) and runs the backward of its own
/// batch; each parameter's gradient hook copies its gradient into a bucket, and a bucket is
/// all-reduced (`MPI_Iallreduce`) as soon as its last gradient has arrived, while the backward
/// goes on. `finish()` waits and adds the average over ranks to `.grad()`. See
/// docs/distributed.md.
///
/// Not part of fusegrad.hpp: it needs <mpi.h> and an MPI library (CMake: fusegrad::mpi).
///
/// How the ranks keep in step without timeouts: every round (a backward and its `finish()`)
/// runs the same collectives in the same order on every rank (the buckets, in bucket order),
/// and each bucket carries, after its gradients, one status slot per rank that only that
/// rank writes. After the sum, every rank reads every rank's status from the same numbers,
/// so a problem one rank sees (a non-finite gradient, a rank that ran no backward, a
/// `requires_grad` changed, a rank that left) is an error on every rank, at the same step.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fusegrad/core/error.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/hooks.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::distributed {

struct data_parallel_options {
  /// A bucket's gradient bytes (DDP's bucket_cap_mb = 25); a larger parameter gets its own.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// Launch a bucket's all-reduce from the hook of its last gradient (true), or launch every
  /// bucket in `finish()`, after the backward (false: no overlap, for comparison).
  bool overlap = true;
};

namespace detail {

template <Element T>
MPI_Datatype mpi_type() {
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

/// Fails with MPI's own words when an MPI call does not return MPI_SUCCESS.
inline void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fusegrad::detail::fail("distributed::data_parallel", call, " returned ", rc, " (",
                         std::string(text, static_cast<std::size_t>(len)), "); expected MPI_SUCCESS");
}

/// A rank's status in one bucket (its status slot): bits, exact in float and double.
enum status : unsigned {
  non_finite = 1,   ///< a gradient of this bucket held a NaN or an infinity on this rank
  no_backward = 2,  ///< this rank called finish() without a backward since the last one
  grad_flag = 4,    ///< a parameter's requires_grad changed since construction
  left = 8,         ///< this rank closed its data_parallel (the end, or an exception)
};

/// One parameter as the signature of construction describes it.
template <Element T>
std::string describe(const tensor<T>& p) {
  if (!p.defined()) return "undefined";
  return to_string(p.shape()) + (std::is_same_v<T, float> ? " float" : " double") +
         (p.requires_grad() ? " requires_grad" : " no grad") + (p.is_leaf() ? "" : " non-leaf");
}

/// Every rank's strings, on every rank (MPI_Allgather of the lengths, then MPI_Allgatherv).
inline std::vector<std::string> all_gather(MPI_Comm comm, const std::string& mine) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(size)), offs(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), "MPI_Allgather");
  long total = 0;
  for (int r = 0; r < size; ++r) {
    offs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += lens[static_cast<std::size_t>(r)];
  }
  if (total > std::numeric_limits<int>::max())
    fusegrad::detail::fail("distributed::data_parallel", "a parameter signature of ", total,
                           " bytes; expected under 2 GiB");
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, comm),
            "MPI_Allgatherv");
  std::vector<std::string> r;
  for (int k = 0; k < size; ++k)
    r.push_back(all.substr(static_cast<std::size_t>(offs[static_cast<std::size_t>(k)]),
                           static_cast<std::size_t>(lens[static_cast<std::size_t>(k)])));
  return r;
}

/// Splits a signature (one line per parameter) into its lines.
inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> r;
  std::size_t b = 0;
  for (std::size_t e; (e = s.find('\n', b)) != std::string::npos; b = e + 1) r.push_back(s.substr(b, e - b));
  return r;
}

/// Compares every rank's signature with rank 0's; the same message, thrown on every rank.
inline void check_signatures(const std::vector<std::string>& sigs) {
  const auto first = lines(sigs.at(0));
  for (std::size_t r = 1; r < sigs.size(); ++r) {
    const auto other = lines(sigs[r]);
    if (other.size() != first.size())
      fusegrad::detail::fail("distributed::data_parallel", "rank ", r, " has ", other.size(),
                             " parameters, rank 0 has ", first.size(),
                             "; expected the same parameter list (count, shapes, dtypes, requires_grad) on every rank");
    for (std::size_t k = 0; k < first.size(); ++k)
      if (other[k] != first[k])
        fusegrad::detail::fail(
            "distributed::data_parallel", "parameter ", k, " is ", other[k], " on rank ", r, " but ", first[k],
            " on rank 0; expected the same parameter list (count, shapes, dtypes, requires_grad) on every rank");
  }
}

/// Copies `n` values and says whether one of them is NaN or infinite (an OR of comparisons,
/// which vectorises without reassociating any floating-point sum).
template <Element T>
bool copy_checked(const T* __restrict src, T* __restrict dst, std::size_t n) {
  unsigned bad = 0;
  const T big = std::numeric_limits<T>::max();
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = src[i];
    bad |= static_cast<unsigned>(!(std::abs(src[i]) <= big));
  }
  return bad != 0;
}

}  // namespace detail

/// Data parallelism over MPI for the parameters `params` (DDP): construct it on every rank of
/// `comm` with the same parameter list, then per step: forward and backward of this rank's
/// batch, `finish()`, the optimizer's step. See docs/distributed.md for what `.grad()` holds.
template <Element T>
class data_parallel {
 public:
  data_parallel(std::vector<tensor<T>> params, MPI_Comm comm = MPI_COMM_WORLD, data_parallel_options opts = {})
      : params_(std::move(params)), comm_(comm), opts_(opts), owner_(std::this_thread::get_id()) {
    check_mpi_ready();
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    check_signature();
    broadcast_parameters();
    make_buckets();
    install_hooks();
  }
  data_parallel(const data_parallel&) = delete;  // the hooks hold `this`
  data_parallel& operator=(const data_parallel&) = delete;

  /// Leaves as `close()` does, without throwing: a rank that unwinds an exception through
  /// its data_parallel still meets the others' next round, which then fails on their side
  /// ("rank r left") instead of waiting for ever.
  ~data_parallel() {
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (hook_ids_[k] != 0 && params_[k].defined()) params_[k].remove_hook(hook_ids_[k]);
    try {
      close();
    } catch (const std::exception& e) { std::fprintf(stderr, "rank %d: %s\n", rank_, e.what()); }
  }

  /// Waits for every bucket of this step, then adds the average over ranks of this step's
  /// gradients to each parameter's `.grad()` (the average itself after `zero_grad()`). Throws,
  /// with the same message on every rank and without touching `.grad()`, where a rank had a
  /// non-finite gradient, ran no backward, changed a `requires_grad`, or had left.
  void finish() {
    check_thread("distributed::data_parallel::finish");
    if (closed_)
      fusegrad::detail::fail("distributed::data_parallel::finish",
                             "called after close() or after another rank left; expected a "
                             "data_parallel that every rank still runs");
    if (buckets_.empty()) {  // no parameter takes gradients: nothing to average
      ++step_;
      return;
    }
    if (!open_) begin_round();
    complete_round(arrived_count_ == 0 ? detail::no_backward : 0u);
    check_statuses();
    write_grads();
  }

  /// Ends this rank's part: one last round that tells the others it left (every rank closes
  /// so at its end). Throws where another rank was still running its steps; then that rank's
  /// `finish()` has thrown too. Idempotent.
  void close() {
    if (closed_) return;
    check_thread("distributed::data_parallel::close");
    closed_ = true;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || buckets_.empty()) return;
    const bool carried = !open_ || launched_ < buckets_.size();  // a bucket of this round will say so
    if (!open_) begin_round();
    complete_round(detail::left);
    bool others_left = false;
    for (int r = 0; r < size_; ++r) others_left = others_left || (r != rank_ && (rank_status(r) & detail::left));
    // Every bucket of the round had gone out: one more round says so, unless another rank left
    // in this one (every rank read that, and none runs another round).
    if (!carried && !others_left) {
      begin_round();
      complete_round(detail::left);
    }
    for (int r = 0; r < size_; ++r)
      if (!(rank_status(r) & detail::left))
        fusegrad::detail::fail("distributed::data_parallel::close", "rank ", rank_, " left after step ", step_,
                               " while rank ", r, " ran on; expected every rank to run the same number of steps");
  }

  /// Steps completed by `finish()`.
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  /// The buckets' parameter indices, in launch order (the parameters' reverse order).
  [[nodiscard]] std::vector<std::vector<std::size_t>> buckets() const {
    std::vector<std::vector<std::size_t>> r;
    for (const auto& b : buckets_) r.push_back(b.params);
    return r;
  }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }

 private:
  struct bucket {
    std::vector<std::size_t> params;  ///< parameter indices
    std::vector<T> buf;               ///< the gradients, then one status slot per rank
    std::size_t payload = 0;          ///< gradient values
    std::size_t waiting = 0;          ///< gradients still to arrive this round
    unsigned status = 0;              ///< this rank's status bits for this bucket, this round
    MPI_Request req = MPI_REQUEST_NULL;
  };
  struct slot {
    std::size_t bucket = 0, offset = 0;
    bool arrived = false;
  };

  void check_mpi_ready() const {
    int init = 0, finalized = 0, level = 0, is_main = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&finalized);
    if (!init || finalized)
      fusegrad::detail::fail("distributed::data_parallel", "MPI is ", init ? "finalized" : "not initialized",
                             "; expected MPI_Init_thread before and MPI_Finalize after every data_parallel");
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&is_main);
    // fusegrad's loops may run on OpenMP threads: MPI must allow threads, with every MPI call
    // (the hooks' included) on the thread that initialised it.
    if (level < MPI_THREAD_FUNNELED || !is_main)
      fusegrad::detail::fail(
          "distributed::data_parallel", "MPI thread level ", level,
          is_main ? "" : " on a thread that is not MPI's main thread",
          "; expected MPI_Init_thread with at least MPI_THREAD_FUNNELED, and the data_parallel on MPI's main thread");
  }

  void check_thread(const char* op) const {
    if (std::this_thread::get_id() != owner_)
      fusegrad::detail::fail(op,
                             "called on another thread than the one that made the data_parallel; expected every "
                             "backward, finish() and close() on that thread (MPI_THREAD_FUNNELED)");
  }

  void check_signature() {
    std::string mine;
    for (const auto& p : params_) mine += detail::describe(p) + "\n";
    detail::check_signatures(detail::all_gather(comm_, mine));
    // Equal on every rank now, so every rank fails alike.
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto& p = params_[k];
      if (!p.defined() || !p.is_leaf() || !p.is_contiguous())
        fusegrad::detail::fail("distributed::data_parallel", "parameter ", k, " is ", detail::describe(p),
                               p.defined() && !p.is_contiguous() ? " (strided)" : "",
                               "; expected defined, contiguous leaf tensors");
      requires_grad_.push_back(p.requires_grad());
    }
  }

  void broadcast_parameters() {
    for (auto& p : params_) {
      if (p.numel() == 0) continue;
      detail::check_mpi(MPI_Bcast(p.data(), static_cast<int>(p.numel()), detail::mpi_type<T>(), 0, comm_), "MPI_Bcast");
      p.impl()->store->bump_version();  // written in place: a tape that saved it refuses it
    }
  }

  /// Buckets in the parameters' reverse order (a backward reaches the last layers first), each
  /// up to `bucket_bytes` of gradients; parameters without requires_grad take no part.
  void make_buckets() {
    slots_.resize(params_.size());
    const std::size_t cap = std::max<std::size_t>(1, opts_.bucket_bytes / sizeof(T));
    for (std::size_t k = params_.size(); k-- > 0;) {
      if (!requires_grad_[k]) continue;
      const auto n = static_cast<std::size_t>(params_[k].numel());
      if (buckets_.empty() || (buckets_.back().payload > 0 && buckets_.back().payload + n > cap))
        buckets_.emplace_back();
      auto& b = buckets_.back();
      slots_[k] = {buckets_.size() - 1, b.payload, false};
      b.params.push_back(k);
      b.payload += n;
    }
    for (auto& b : buckets_) {
      if (b.payload + static_cast<std::size_t>(size_) > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        fusegrad::detail::fail("distributed::data_parallel", "a bucket of ", b.payload,
                               " values; expected under 2^31 (one parameter that large cannot be reduced in one call)");
      b.buf.assign(b.payload + static_cast<std::size_t>(size_), T(0));
    }
  }

  void install_hooks() {
    hook_ids_.assign(params_.size(), 0);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (!requires_grad_[k]) continue;
      // Not generic: under compiled autograd it is a call_hook node of the captured graph, run
      // on the gradient's value. It returns zeros, so that the backward adds nothing to
      // `.grad()`; finish() adds the average.
      hook_ids_[k] = params_[k].register_hook([this, k](const tensor<T>& g) -> tensor<T> {
        on_grad(k, g);
        return zeros<T>(g.shape());
      });
    }
  }

  void on_grad(std::size_t k, const tensor<T>& g) {
    check_thread("distributed::data_parallel (gradient hook)");
    if (closed_)
      fusegrad::detail::fail("distributed::data_parallel", "a gradient of parameter ", k,
                             " after close(); expected no backward through a closed data_parallel");
    if (!open_) begin_round();
    auto& s = slots_[k];
    if (s.arrived)
      fusegrad::detail::fail("distributed::data_parallel", "the gradient of parameter ", k, " arrived twice in step ",
                             step_ + 1,
                             "; expected finish() after each backward (to accumulate, call finish() after each one)");
    auto& b = buckets_[s.bucket];
    const tensor<T> c = g.contiguous();
    if (detail::copy_checked(c.data(), b.buf.data() + s.offset, static_cast<std::size_t>(c.numel())))
      b.status |= detail::non_finite;
    s.arrived = true;
    ++arrived_count_;
    --b.waiting;
    if (!opts_.overlap) return;
    launch_ready();
    progress();
  }

  /// Open MPI (like most MPIs, without an asynchronous progress thread) moves a nonblocking
  /// collective on only inside MPI calls: every gradient that arrives tests the buckets in
  /// flight, so that they advance while the backward runs instead of all in finish().
  void progress() {
    for (std::size_t i = 0; i < launched_; ++i) {
      if (buckets_[i].req == MPI_REQUEST_NULL) continue;
      int done = 0;
      detail::check_mpi(MPI_Test(&buckets_[i].req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
  }

  void begin_round() {
    open_ = true;
    launched_ = 0;
    arrived_count_ = 0;
    for (auto& b : buckets_) {
      b.waiting = b.params.size();
      b.status = 0;
    }
    for (auto& s : slots_) s.arrived = false;
    // Checked when the round begins (the first gradient), so the first bucket carries it.
    round_status_ = 0;
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (params_[k].requires_grad() != requires_grad_[k]) round_status_ |= detail::grad_flag;
  }

  /// Launches the buckets whose gradients are all here, in bucket order: every rank runs the
  /// same collectives in the same order, whatever order its gradients come in.
  void launch_ready() {
    while (launched_ < buckets_.size() && buckets_[launched_].waiting == 0) launch(buckets_[launched_++]);
  }

  void launch(bucket& b) {
    T* st = b.buf.data() + b.payload;
    for (int r = 0; r < size_; ++r) st[r] = T(0);
    st[rank_] = static_cast<T>(b.status | round_status_);
    detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, b.buf.data(), static_cast<int>(b.buf.size()), detail::mpi_type<T>(),
                                     MPI_SUM, comm_, &b.req),
                      "MPI_Iallreduce");
  }

  /// Fills what did not arrive (zeros: a parameter this backward did not reach), marks every
  /// bucket with `extra`, launches the rest and waits for all.
  void complete_round(unsigned extra) {
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (!requires_grad_[k]) continue;
      auto& s = slots_[k];
      auto& b = buckets_[s.bucket];
      if (s.arrived) continue;
      std::fill_n(b.buf.begin() + static_cast<std::ptrdiff_t>(s.offset), params_[k].numel(), T(0));
      s.arrived = true;
      --b.waiting;
    }
    round_status_ |= extra;  // the buckets not launched yet carry it
    launch_ready();
    for (auto& b : buckets_) detail::check_mpi(MPI_Wait(&b.req, MPI_STATUS_IGNORE), "MPI_Wait");
    open_ = false;
  }

  /// Rank `r`'s status bits over every bucket of the round just completed.
  [[nodiscard]] unsigned rank_status(int r) const {
    unsigned s = 0;
    for (const auto& b : buckets_) s |= static_cast<unsigned>(b.buf[b.payload + static_cast<std::size_t>(r)]);
    return s;
  }

  /// Reads every rank's status (the same numbers on every rank) and throws for the first
  /// problem, the same on every rank.
  void check_statuses() {
    ++step_;
    for (unsigned bit : {unsigned{detail::left}, unsigned{detail::no_backward}, unsigned{detail::grad_flag},
                         unsigned{detail::non_finite}})
      for (int r = 0; r < size_; ++r)
        if (rank_status(r) & bit) fail_status(bit, r);
  }

  [[noreturn]] void fail_status(unsigned bit, int r) {
    const char* op = "distributed::data_parallel::finish";
    if (bit == detail::left) {
      closed_ = true;  // the rank that left runs no more rounds: neither may this one
      fusegrad::detail::fail(op, "rank ", r, " left (close(), the end of its loop, or an exception) while rank ", rank_,
                             " ran step ", step_, "; expected every rank to run the same number of steps");
    }
    if (bit == detail::no_backward)
      fusegrad::detail::fail(op, "rank ", r, " called finish() without a backward at step ", step_,
                             "; expected a backward on every rank before each finish()");
    if (bit == detail::grad_flag)
      fusegrad::detail::fail(op, "a parameter's requires_grad changed on rank ", r,
                             " after construction (found at step ", step_,
                             "); expected the requires_grad of construction on every rank");
    std::string where;
    for (std::size_t i = 0; i < buckets_.size(); ++i)
      if (static_cast<unsigned>(buckets_[i].buf[buckets_[i].payload + static_cast<std::size_t>(r)]) &
          detail::non_finite) {
        where = std::to_string(buckets_[i].params.front());
        break;
      }
    fusegrad::detail::fail(
        op, "rank ", r, " had a NaN or infinite gradient at step ", step_, " (a parameter of the bucket of parameter ",
        where,
        "); expected finite gradients on every rank (no gradient was changed: skip the step on every rank, or stop)");
  }

  /// `.grad() += sum / size` for every parameter that takes part; every new gradient is made
  /// (and checked: a sum may overflow) before any is set, so a throw changes none.
  void write_grads() {
    std::vector<tensor<T>> out(params_.size());
    unsigned bad = 0;
    const T n = static_cast<T>(size_), big = std::numeric_limits<T>::max();
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (!requires_grad_[k]) continue;
      const auto& s = slots_[k];
      const T* sum = buckets_[s.bucket].buf.data() + s.offset;
      const tensor<T> old = params_[k].grad();
      const tensor<T> oc = old.defined() ? old.contiguous() : old;
      out[k] = fusegrad::detail::empty<T>(params_[k].shape(), "distributed::data_parallel");
      T* __restrict o = out[k].data();
      const auto m = static_cast<std::size_t>(params_[k].numel());
      if (oc.defined()) {
        const T* __restrict a = oc.data();
        for (std::size_t i = 0; i < m; ++i) o[i] = a[i] + sum[i] / n;
      } else {
        for (std::size_t i = 0; i < m; ++i) o[i] = sum[i] / n;
      }
      for (std::size_t i = 0; i < m; ++i) bad |= static_cast<unsigned>(!(std::abs(o[i]) <= big));
      if (bad)
        fusegrad::detail::fail("distributed::data_parallel::finish", "the gradient of parameter ", k,
                               " is not finite after averaging at step ", step_,
                               "; expected finite sums (no gradient was changed)");
    }
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (out[k].defined()) params_[k].set_grad(std::move(out[k]));
  }

  std::vector<tensor<T>> params_;
  MPI_Comm comm_;
  data_parallel_options opts_;
  std::thread::id owner_;
  int rank_ = 0, size_ = 1;
  std::vector<bool> requires_grad_;
  std::vector<std::uint64_t> hook_ids_;
  std::vector<bucket> buckets_;
  std::vector<slot> slots_;
  std::size_t launched_ = 0, arrived_count_ = 0;
  unsigned round_status_ = 0;  ///< status bits for every bucket launched from now on, this round
  std::uint64_t step_ = 0;
  bool open_ = false, closed_ = false;
};

/// Runs `body()`; where it throws, prints the message with the rank and calls MPI_Abort, so
/// that the other ranks end too instead of waiting in a collective (DDP's behaviour under
/// torchrun). Returns what `body` returns.
template <class F>
int run_or_abort(F&& body, MPI_Comm comm = MPI_COMM_WORLD) {
  try {
    return body();
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(comm, 1);
    return 1;
  }
}

}  // namespace fusegrad::distributed
