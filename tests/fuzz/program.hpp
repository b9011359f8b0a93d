#pragma once
// Run-time programs of the differential fuzzer: an op list with operand indices over symbolic
// shapes (valid by construction for every assignment of sizes to the symbols), the one
// generic interpreter that runs a program over fg::tensor<double> for every path (eager, jit,
// compiled autograd), and the printer of a program as a self-contained C++ reproducer.
#include <memory>
#include <string>
#include <vector>

#include "fuzz.hpp"

namespace fuzz {

// clang-format off
enum class op : std::uint8_t {
  // element-wise, one operand
  neg, abs, sqrt, exp, log, sin, cos, tanh, sigmoid, relu,
  tan, atan, sinh, asinh, softplus, silu, gelu, erf, log1p, expm1, square, reciprocal, rsqrt,  // the op library
  user_softsign, user_function,  // a user's op and a user's fg::function (user_ops.hpp)
  step, sign,
  // with a scalar
  add_s, sub_s, rsub_s, mul_s, div_s, rdiv_s, pow_s,
  // element-wise, two operands (broadcasting)
  add, sub, mul, div, maximum, pow, minimum, atan2, hypot, user_bilinear, gt, ge, lt, le, eq, ne,
  // reductions
  sum_all, mean_all, max_all, sum_dims, mean_dims, max_dims,
  // along one dim (`i0`; the normalisations: the last): the softmax family, as attention and
  // cross-entropy use it, and the normalisations of a transformer block
  softmax_dim, log_softmax_dim, logsumexp_dim, layer_norm_last, rms_norm_last,
  // layout
  reshape_flat, reshape_merge, view_flat, expand_as, permute, transpose, select, slice, unsqueeze,
  squeeze, contiguous, clone, cat, detach,
  // matrix products
  matmul, mm, bmm, linear,
  // control: a branch on a value, graph breaks, hooks
  branch, graph_break, hook, retain_grad,
  // an input: `slot` is its index among the program's inputs
  input,
  // deliberately invalid: eager throws fusegrad::error, every path must throw too
  bad_reshape, bad_select, bad_dim, bad_permute, bad_item, bad_expand, bad_hook, bad_sum_dup, bad_view,
  count_
};
// clang-format on
const char* op_name(op k);

/// Hook kinds: a replacement gradient from a non-generic hook (an opaque call under compiled
/// autograd), the same from a generic hook (traced), an observer that reads the gradient's
/// values and returns nothing, and an observer removed right after it is registered (it
/// must never run).
enum class hook_kind : std::uint8_t { scale, scale_generic, observe, removed };

/// A dim of a symbolic shape: -1 is a literal 1, otherwise a symbol's index.
using symshape = std::vector<int>;

/// A size: free (each shape set gives it a value), or derived from others: `plus` is
/// size(base) + add (for invalid programs: never 1, never equal to base's size), `product`
/// the product of `of` (a flattening reshape), `sliced` the length of a slice of `base`,
/// `sum` size(of[0]) + size(of[1]) (cat). Symbol -1 in `of`/`base` is a literal 1.
struct symbol {
  enum kind_t : std::uint8_t { free, plus, product, sliced, sum } kind = free;
  int base = -1;
  int add = 0;
  std::vector<int> of;
  long long start = 0, stop = 0, step = 1;
};

struct instr {
  op k{};
  int a = -1, b = -1, c = -1;     ///< operands (value indices)
  double s = 0;                   ///< scalar (and a branch's threshold, a hook's factor)
  std::vector<fg::index_t> dims;  ///< reduced or permuted dims
  bool keepdim = false;
  fg::index_t i0 = 0, i1 = 0, i2 = 0, i3 = 1;  ///< dims, indices, slice bounds and step
  op u0 = op::neg, u1 = op::neg;               ///< a branch's two arms (element-wise, one operand)
  hook_kind hk = hook_kind::scale;
  int slot = -1;  ///< an input's index, an observing hook's slot, a retained tensor's slot
  // what the generator knows of the result
  symshape shape;
  bool rg = false, exact = true, contig = true;
};

/// One input: its symbolic shape, whether it requires grad, and special values written over
/// some of its elements (at fractions of its size).
struct input {
  symshape shape;
  bool rg = true;
  std::vector<std::pair<double, double>> specials;  ///< (position in [0, 1), value)
};

struct program {
  std::uint64_t seed = 0;
  std::vector<symbol> syms;
  std::vector<input> inputs;
  std::vector<instr> code;
  std::vector<int> outputs;
  int slots = 0;     ///< observing hooks
  int retained = 0;  ///< retain_grad results
  /// What the generator knows of value `v` (an input or an instruction's result).
  [[nodiscard]] const symshape& shape_of(int v) const;
  [[nodiscard]] bool rg_of(int v) const;
  [[nodiscard]] bool exact_of(int v) const;
  [[nodiscard]] int n_values() const { return static_cast<int>(code.size()); }
};

/// Sizes of the free symbols: one shape set.
using shape_set = std::vector<fg::index_t>;
fg::index_t size_of(const program& p, const shape_set& ss, int sym);
fg::shape concrete(const program& p, const shape_set& ss, const symshape& s);

/// A program's inputs for one shape set: deterministic in (program seed, input, set).
std::vector<D> make_inputs(const program& p, const shape_set& ss, int set_index);
/// The weights of the loss `sum_i sum(out_i * w_i)` for output `i` of shape `s`.
D loss_weight(const program& p, std::size_t i, const fg::shape& s);
std::uint64_t input_seed(const program& p, std::size_t i, int set_index);

/// What the interpreter noticed while running a program on real tensors: the features the
/// known-issue switches key on (collected by the eager reference run of each shape set).
enum feature : std::uint32_t {
  f_reduce_trivial = 1u << 0,  ///< a reduction over nothing (0-d input, or reduced dims all of size 1)
  f_reduce_empty = 1u << 1,    ///< a reduction over an empty dim
  f_empty_value = 1u << 2,     ///< some value has no elements
  f_hook_nonleaf = 1u << 3,    ///< a hook or retain_grad on a non-leaf tensor
  f_hook_leaf = 1u << 4,       ///< a hook on an input
  f_tiny_value = 1u << 5,      ///< some value has an element with 0 < |v| < 1e-150 (see `cancellation`)
  f_saturated = 1u << 6,       ///< tanh, exp, ... of an element beyond +-8 (see `finite_difference_mismatch`)
  f_on_a_step = 1u << 7,       ///< a comparison whose operands are equal somewhere: a step of the loss at the point
};

/// What one run saw: per observing hook, the sum of each gradient it was given; features.
struct run_log {
  std::vector<std::vector<double>> observed;
  std::uint32_t features = 0;
  /// The largest finite |x| over the program's values (reference runs only; see
  /// `zero_by_cancellation`).
  double scale = 0;
  /// Whether the interpreter may read values (the eager reference run: reading a lazy
  /// tensor's values under fg::jit would be a sync point, changing the path under test).
  bool read_values = false;
};
using hook_log = run_log;

/// Runs `p` on `in` (the `input` instructions read them) and returns its outputs followed by its
/// retained tensors. The one interpreter of every path.
std::vector<D> interpret(const program& p, const std::vector<D>& in, const std::shared_ptr<hook_log>& log);

/// Generates program number `index` of the run seeded `seed`.
program generate(std::uint64_t seed, std::uint64_t index);
/// Three shape sets: the first, then two with some sizes changed (automatic dynamic shapes).
std::vector<shape_set> make_shape_sets(const program& p);

/// The program as C++ (its body), one statement per instruction.
std::string print_program(const program& p);
/// How a path runs a program: the forward eagerly or through `fg::jit` (with its fused or
/// eager backend), the backward eagerly or under compiled autograd (fused or eager backend).
struct path_desc {
  const char* name = "eager";
  bool jit = false;
  bool jit_eager_backend = false;
  int ca = 0;  ///< 0: the eager engine; 1: compiled autograd, fused; 2: compiled autograd, eager backend
  /// `fg::jit` with `trace_once`: a call of a new signature traces, a later one replays the
  /// record without calling the program.
  bool trace_once = false;
};

/// A self-contained reproducer: the program, the inputs of the shape sets, and a main that
/// runs the calls `calls` (shape-set indices, in order) eagerly and through `path`, printing both.
std::string print_reproducer(const program& p, const std::vector<shape_set>& sets, const std::vector<int>& calls,
                             const path_desc& path, const std::string& why);

}  // namespace fuzz
