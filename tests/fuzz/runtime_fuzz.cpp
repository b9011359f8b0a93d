// The run-time program fuzzer: every generated program runs eagerly (the reference) and
// through each path (fg::jit with either backend on three shape sets, compiled autograd over
// eager and jitted forwards); values, gradients, retained gradients and what hooks saw are
// compared. A mismatch is shrunk and printed as a self-contained reproducer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>

#include <fusegrad/native/code_cache.hpp>

#include "program.hpp"

namespace fuzz {

namespace {

/// What one run of a program on one shape set gave.
struct outcome {
  bool threw = false, fg_error = false;
  std::string what;
  std::vector<snap> outs, grads, retained_grads;
  std::vector<std::vector<double>> observed;
  std::uint32_t features = 0;
  double scale = 0;  ///< the largest finite |x| over the program's values (reference runs)
};

/// The jitted function's body: the interpreter. `runs` counts its calls (a trace_once replay
/// makes none).
struct jit_body {
  const program* p;
  std::shared_ptr<hook_log>* log;
  long* runs;
  std::vector<D> operator()(const std::vector<D>& in) const {
    ++*runs;
    return interpret(*p, in, *log);
  }
};
using jitted = fg::jit_function<jit_body>;

/// Runs `p` on shape set `ss` through `path`. The loss sums the outputs that require grad
/// in the reference run `ref` (the path's own flags where there is none), as a user's code
/// written against eager would.
outcome execute(const program& p, const shape_set& ss, int set_index, const path_desc& path, jitted* jf,
                std::shared_ptr<hook_log>* jf_log, const outcome* ref) {
  auto log = std::make_shared<hook_log>();
  log->observed.resize(static_cast<std::size_t>(p.slots));
  log->read_values = !ref && !path.jit && path.ca == 0;
  outcome r;
  try {
    std::vector<D> in = make_inputs(p, ss, set_index);
    std::vector<D> out;
    if (path.jit) {
      *jf_log = log;
      out = (*jf)(in);
    } else {
      out = interpret(p, in, log);
    }
    D loss;
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      r.outs.push_back(snapshot(out[k]));
      const bool in_loss =
          ref && !ref->threw && k < ref->outs.size() ? ref->outs[k].requires_grad : out[k].requires_grad();
      if (!in_loss) continue;
      D l = fg::sum(out[k] * loss_weight(p, k, out[k].shape()));
      loss = loss.defined() ? D(loss + l) : l;
    }
    if (loss.defined()) {
      if (path.ca == 1) {
        fg::compiled_autograd::enable on;
        loss.backward();
      } else if (path.ca == 2) {
        fg::compiled_autograd::enable on(fg::backend::aot_eager{});
        loss.backward();
      } else {
        loss.backward();
      }
    }
    for (const D& t : in) r.grads.push_back(snapshot(t.grad()));
    for (std::size_t k = p.outputs.size(); k < out.size(); ++k)
      r.retained_grads.push_back(out[k].defined() ? snapshot(out[k].grad()) : snap{});
    r.observed = log->observed;
    r.features = log->features;
    r.scale = log->scale;
  } catch (const fg::error& e) {
    r.threw = r.fg_error = true;
    r.what = e.what();
    r.features = log->features;
  } catch (const std::exception& e) {
    r.threw = true;
    r.what = std::string("a non-fusegrad exception: ") + e.what();
    r.features = log->features;
  }
  if (path.jit) *jf_log = nullptr;
  return r;
}

/// The first difference between the reference and a path's outcome, as "<class>: <details>"
/// (the class is what shrinking keeps), or empty.
std::string differ(const program& p, const outcome& want, const outcome& got) {
  if (want.threw != got.threw)
    return want.threw ? "throw: eager threw \"" + want.what + "\"; the path did not"
                      : "throw: the path threw \"" + got.what + "\"; eager did not";
  if (want.threw) return got.fg_error ? "" : "throw: eager threw fusegrad::error; the path threw " + got.what;
  for (std::size_t k = 0; k < want.outs.size(); ++k) {
    const bool exact = p.exact_of(p.outputs[k]);
    if (want.outs[k].requires_grad != got.outs[k].requires_grad)
      return "requires_grad: output " + std::to_string(k) + " (v" + std::to_string(p.outputs[k]) + ") requires_grad " +
             (want.outs[k].requires_grad ? "true" : "false") + " eagerly, " +
             (got.outs[k].requires_grad ? "true" : "false") + " on the path";
    if (const std::string d = compare(want.outs[k], got.outs[k], {exact, 1e-9}); !d.empty())
      return std::string(exact ? "value (bitwise)" : "value") + ": output " + std::to_string(k) + " (v" +
             std::to_string(p.outputs[k]) + "): " + d;
  }
  // A gradient that is undefined on one side and zeros on the other counts as equal: a jitted
  // graph's backward gives every input of the graph a gradient (zeros when no output used
  // reaches it), as AOTAutograd does.
  auto zeros_or_undefined = [](const snap& a, const snap& b) {
    const snap& def = a.defined ? a : b;
    return a.defined != b.defined && std::all_of(def.v.begin(), def.v.end(), [](double x) { return x == 0; });
  };
  // A 0 against NaN or inf where the program has an empty value (see known_issues()).
  auto regrouped = [&](const snap& a, const snap& b) {
    if (!(want.features & f_empty_value) || !masked("empty_regrouping") || !zero_vs_nonfinite(a, b)) return false;
    count_masked("empty_regrouping");
    return true;
  };
  // Gradient elements that are zero up to rounding at the program's scale (see known_issues())
  double scale = want.scale;
  for (const snap& g : want.grads)
    for (double x : g.v)
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  const double noise = masked("zero_by_cancellation") ? 64 * std::numeric_limits<double>::epsilon() * scale : 0;
  for (std::size_t k = 0; k < want.grads.size(); ++k)
    if (zeros_or_undefined(want.grads[k], got.grads[k]) || regrouped(want.grads[k], got.grads[k])) continue;
    else if (auto d = compare(want.grads[k], got.grads[k], {false, 1e-8, true, noise}); !d.empty())
      return std::string(want.grads[k].defined != got.grads[k].defined ? "grad defined" : "grad") + ": input " +
             std::to_string(k) + ": " + d;
  for (std::size_t k = 0; k < want.retained_grads.size(); ++k)
    if (zeros_or_undefined(want.retained_grads[k], got.retained_grads[k]) ||
        regrouped(want.retained_grads[k], got.retained_grads[k]))
      continue;
    else if (auto d = compare(want.retained_grads[k], got.retained_grads[k], {false, 1e-8, true, noise}); !d.empty())
      return "retained grad: retained tensor " + std::to_string(k) + ": " + d;
  for (std::size_t k = 0; k < want.observed.size(); ++k) {
    // a hook given a gradient of zeros (see zeros_or_undefined) is as good as not run
    auto nonzero = [](const std::vector<double>& o) {
      std::vector<double> r;
      for (double x : o)
        if (x != 0) r.push_back(x);
      return r;
    };
    const auto a = nonzero(want.observed[k]);
    const auto b = nonzero(got.observed[k]);
    if (a.size() != b.size())
      return "hook: observing hook " + std::to_string(k) + " ran " + std::to_string(a.size()) + " times eagerly, " +
             std::to_string(b.size()) + " times on the path";
    for (std::size_t i = 0; i < a.size(); ++i) {
      snap x, y;
      x.defined = y.defined = true;
      x.v = {a[i]};
      y.v = {b[i]};
      if (auto d = compare(x, y, {false, 1e-8, true}); !d.empty())
        return "hook: observing hook " + std::to_string(k) + " saw " + d;
    }
  }
  return "";
}

std::string mismatch_class(const std::string& d) { return d.substr(0, d.find(':')); }

/// A path and the shape sets it is called on, in order (one jitted function for all calls).
struct plan {
  path_desc path;
  std::vector<int> calls;
};
/// Eager itself, as the "path" of a reference run that threw something else than fusegrad::error.
const plan eager_plan{{"eager", false, false, 0}, {0}};

const std::vector<plan>& plans() {
  static const std::vector<plan> ps{
      {{"fg::jit (fused)", true, false, 0}, {0, 1, 2, 0}},
      {{"fg::jit (eager backend)", true, true, 0}, {0, 1}},
      {{"compiled autograd (fused) over an eager forward", false, false, 1}, {0, 1}},
      {{"compiled autograd (eager backend) over an eager forward", false, false, 2}, {2}},
      {{"fg::jit forward + compiled autograd (fused)", true, false, 1}, {0, 2}},
      // Each shape set is its own signature: its first call traces, its second replays.
      {{"fg::jit (trace_once)", true, false, 0, true}, {0, 0, 1, 1}},
  };
  return ps;
}

/// Known issues that mask a whole call of a path (see known_issues()), keyed on what the
/// reference run saw: the name of the first that applies, or null. The path still runs (a
/// crash or a sanitizer report still counts); only the comparison is skipped.
const char* masked_by(const program& p, const plan& pl, const outcome& ref) {
  (void)ref;  // ref.features: what the interpreter saw on real tensors, for switches that need it
  (void)p;
  (void)pl;
  return nullptr;
}

/// Whether mismatch `d` is a gradient's of a program whose reference run saw a tiny value
/// (the `cancellation` switch, see known_issues()).
bool ill_conditioned(const outcome& ref, const std::string& d) {
  const std::string cls = mismatch_class(d);
  return masked("cancellation") && (ref.features & f_tiny_value) &&
         (cls == "grad" || cls == "retained grad" || cls == "hook");
}

/// Whether a finite difference of `p`'s loss may stand as an oracle for eager's gradients: no
/// gradient changed or cut on purpose (replacing hooks, detach) and no invalid op. Kinks and
/// steps (abs, relu, max, comparisons, branches) stay: at random inputs a small step rarely
/// crosses one, and one that does makes the differences disagree from step to step (below).
bool smooth(const program& p) {
  for (const instr& i : p.code) {
    if (i.k == op::detach || i.k >= op::bad_reshape) return false;
    if (i.k == op::hook && (i.hk == hook_kind::scale || i.hk == hook_kind::scale_generic)) return false;
  }
  return true;
}

/// Whether the loss `loss_at` (of the step along the direction) has a kink nearer the point
/// than `h`, judged against a central difference off by `mismatch`. Every step crosses such a
/// kink, so the central differences agree with each other and not with the one-sided slope
/// eager's gradient takes; the one-sided differences at `h` then differ by about twice the
/// mismatch, where a smooth loss keeps them within `h` times its curvature
/// (`abs(softclip(x))` with one of 180,224 inputs 2.2e-7 from 0 did so).
template <class Loss>
bool kink_within(const Loss& loss_at, double h, double mismatch) {
  const double up = loss_at(h), at = loss_at(0), down = loss_at(-h);
  return std::isfinite(at) && std::abs((up - at) / h - (at - down) / h) > mismatch;
}

/// The second oracle, for eager itself (the paths are compared with eager, so a wrong eager
/// gradient that every path shares would pass them all; found so: linear's backward on a
/// permuted gradient): along a random direction v over the inputs that take a gradient, the
/// central difference of the loss against the sum of <grad, v> of an eager run on shape set 0. Tried at three steps: a
/// mismatch at all three whose differences agree with each other is reported ("" if none); `checks` counts the
/// comparisons made.
std::string finite_difference_mismatch(const program& p0, const shape_set& ss, long* checks) {
  // Without the special input values (inf, nan, zeros: no derivative to check there), run
  // eagerly as the reference runs.
  program p = p0;
  for (input& in : p.inputs) in.specials.clear();
  if (!smooth(p)) return "";
  const outcome ref = execute(p, ss, 0, {"eager"}, nullptr, nullptr, nullptr);
  // Values at which the loss is flat in double (tanh(-20) + 1 is 0), or on a comparison's step
  // (not differentiable there), are skipped too.
  if (ref.threw || (ref.features & (f_tiny_value | f_empty_value | f_saturated | f_on_a_step))) return "";
  const std::vector<D> x = make_inputs(p, ss, 0);
  std::vector<D> dir(x.size());
  double analytic = 0, terms = 0, reach = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!ref.grads[k].defined) continue;
    dir[k] = fg::randn<double>(x[k].shape(), input_seed(p, k, 0) ^ 0x9e3779b97f4a7c15ULL);
    const std::vector<double> v = dir[k].to_vector();
    for (std::size_t e = 0; e < v.size(); ++e) {
      // A huge derivative (tanh(x)^-2 near x = 0) comes with huge higher ones: no step of a
      // difference is small enough there.
      const double g = ref.grads[k].v[e];
      if (!std::isfinite(g) || std::abs(g) > 1e5) return "";
      analytic += g * v[e];
      terms += std::abs(g * v[e]);
      reach += std::abs(v[e]);
    }
  }
  if (terms == 0) return "";
  // A gradient element that is zero up to rounding (terms of the program's size cancelling:
  // x - cat(x, x)) is off by up to a few eps of that size (as `zero_by_cancellation`).
  const double cancelled = 64 * std::numeric_limits<double>::epsilon() * ref.scale * reach;
  // The program as the reference ran it (with grad: its hooks and retain_grad need it), on
  // x + h v; NaN where it throws.
  auto loss_at = [&](double h) {
    try {
      std::vector<D> in;
      for (std::size_t k = 0; k < x.size(); ++k) {
        in.push_back(dir[k].defined() ? D((x[k] + dir[k] * h).detach()) : x[k].detach());
        in.back().requires_grad(p.inputs[k].rg);
      }
      auto log = std::make_shared<hook_log>();
      log->observed.resize(static_cast<std::size_t>(p.slots));
      const std::vector<D> out = interpret(p, in, log);
      double l = 0;
      for (std::size_t k = 0; k < p.outputs.size(); ++k)
        if (ref.outs[k].requires_grad) l += fg::sum(out[k] * loss_weight(p, k, out[k].shape())).item();
      return l;
    } catch (const std::exception&) { return std::numeric_limits<double>::quiet_NaN(); }
  };
  // Truncation (h^2 times a third derivative) within 1e-5 of the terms' size, rounding of the
  // loss (its size times 1e-14) over the step.
  double fd[3];
  const double steps[3] = {1e-6, 1e-5, 1e-7};
  for (int j = 0; j < 3; ++j) {
    const double h = steps[j], up = loss_at(h), down = loss_at(-h);
    if (!std::isfinite(up) || !std::isfinite(down)) return "";
    fd[j] = (up - down) / (2 * h);
    if (std::abs(fd[j] - analytic) <= 1e-5 * terms + cancelled + 1e-14 * (std::abs(up) + std::abs(down)) / h) {
      if (checks) ++*checks;
      return "";
    }
  }
  // Differences that do not settle as the step shrinks (a value near a pole: sin(0.5 / x) at
  // x near 0) say nothing of the gradient.
  const double spread = std::max({fd[0], fd[1], fd[2]}) - std::min({fd[0], fd[1], fd[2]});
  if (spread > 1e-3 * (std::abs(fd[0]) + terms) + cancelled) return "";
  if (kink_within(loss_at, steps[2], std::abs(fd[2] - analytic))) return "";
  if (checks) ++*checks;
  char why[256];
  std::snprintf(why, sizeof why,
                "grad (finite differences): along a random direction eager's gradients give %.9g (terms of size %.3g), "
                "central differences of the loss %.9g (steps 1e-6, 1e-5, 1e-7 agree)",
                analytic, terms, fd[0]);
  return why;
}

/// Whether `o` is trace_once's documented refusal of a function it cannot replay (a hook
/// registered inside, an opaque call, a tensor read from outside the arguments, ...): each
/// such error ends with what to do instead.
bool refused_by_trace_once(const outcome& o) {
  return o.fg_error && o.what.find("call fg::jit without trace_once") != std::string::npos;
}

struct checker {
  const std::vector<shape_set>& sets;
  long* executions = nullptr;
  long* masked_count = nullptr;
  long* replays = nullptr;  ///< trace_once calls compared that replayed a record
  long* refused = nullptr;  ///< trace_once calls refused (`refused_by_trace_once`) where eager ran

  /// Runs every call of plan `pl` on `p`; the first mismatch ("" if none) and the call's index.
  std::string check(const program& p, const plan& pl, const std::vector<outcome>& refs, int* failing_call) {
    std::shared_ptr<hook_log> log;
    long runs = 0;
    std::optional<jitted> jf;
    if (pl.path.jit)
      jf.emplace(jit_body{&p, &log, &runs},
                 fg::jit_options{.recompile_limit = 8,
                                 .name = "fuzz",
                                 .backend = pl.path.jit_eager_backend ? fg::jit_backend::eager : fg::jit_backend::fused,
                                 .trace_once = pl.path.trace_once});
    for (std::size_t c = 0; c < pl.calls.size(); ++c) {
      const int s = pl.calls[c];
      const outcome& ref = refs[static_cast<std::size_t>(s)];
      const long runs_before = runs;
      const outcome got = execute(p, sets[static_cast<std::size_t>(s)], s, pl.path, jf ? &*jf : nullptr, &log, &ref);
      if (pl.path.trace_once && !ref.threw && refused_by_trace_once(got)) {
        if (refused) ++*refused;
        continue;
      }
      const bool replayed = pl.path.trace_once && runs == runs_before;
      if (replayed && replays) ++*replays;
      if (const char* m = masked_by(p, pl, ref)) {
        count_masked(m);
        if (masked_count) ++*masked_count;
        continue;
      }
      if (executions) ++*executions;
      std::string d = differ(p, ref, got);
      if (!d.empty() && ill_conditioned(ref, d)) {
        count_masked("cancellation");
        if (masked_count) ++*masked_count;
        continue;
      }
      if (!d.empty()) {
        if (failing_call) *failing_call = static_cast<int>(c);
        return d;
      }
    }
    return "";
  }

  std::vector<outcome> references(const program& p) {
    std::vector<outcome> refs;
    for (std::size_t s = 0; s < sets.size(); ++s)
      refs.push_back(execute(p, sets[s], static_cast<int>(s), {"eager"}, nullptr, nullptr, nullptr));
    return refs;
  }
};

// ---------------------------------------------------------------------------------------
// Shrinking: drop outputs, dead code, and instructions whose operand can stand in for them,
// while the same path still fails with the same class of mismatch.
// ---------------------------------------------------------------------------------------

/// `p` without the values not flagged in `keep` (which must not be used by kept ones),
/// renumbering values, inputs, hook slots and retained slots.
program kept(const program& p, const std::vector<char>& keep) {
  program q;
  q.seed = p.seed;
  q.syms = p.syms;
  std::vector<int> map(p.code.size(), -1);
  for (std::size_t v = 0; v < p.code.size(); ++v) {
    if (!keep[v]) continue;
    instr i = p.code[v];
    for (int* o : {&i.a, &i.b, &i.c})
      if (*o >= 0) *o = map[static_cast<std::size_t>(*o)];
    if (i.k == op::input) {
      q.inputs.push_back(p.inputs[static_cast<std::size_t>(i.slot)]);
      i.slot = static_cast<int>(q.inputs.size()) - 1;
    } else if (i.k == op::hook && (i.hk == hook_kind::observe || i.hk == hook_kind::removed)) {
      i.slot = q.slots++;
    } else if (i.k == op::retain_grad) {
      i.slot = q.retained++;
    }
    map[v] = q.n_values();
    q.code.push_back(i);
  }
  for (int o : p.outputs) q.outputs.push_back(map[static_cast<std::size_t>(o)]);
  return q;
}

/// Removes every instruction not needed by the outputs (hooks, retain_grad and graph breaks
/// on needed values stay).
program dead_code_eliminated(const program& p) {
  const int n = p.n_values();
  std::vector<char> live(static_cast<std::size_t>(n), 0);
  for (int o : p.outputs) live[static_cast<std::size_t>(o)] = 1;
  bool changed = true;
  while (changed) {
    changed = false;
    for (int v = n - 1; v >= 0; --v) {
      const instr& i = p.code[static_cast<std::size_t>(v)];
      const bool effect = (i.k == op::hook || i.k == op::retain_grad || i.k == op::graph_break) && i.a >= 0 &&
                          live[static_cast<std::size_t>(i.a)];
      if (!live[static_cast<std::size_t>(v)] && !effect) continue;
      if (!live[static_cast<std::size_t>(v)]) live[static_cast<std::size_t>(v)] = 1, changed = true;
      for (int o : {i.a, i.b, i.c})
        if (o >= 0 && !live[static_cast<std::size_t>(o)]) live[static_cast<std::size_t>(o)] = 1, changed = true;
    }
  }
  return kept(p, live);
}

/// `p` with value `v`'s uses replaced by value `by` (or none: `v` must be unused), and `v`
/// removed. Other unused values stay (they may matter: a value alive at a graph break is
/// an output of the flushed graph).
program bypassed(const program& p, int v, int by) {
  program q = p;
  if (by >= 0) {
    for (std::size_t k = static_cast<std::size_t>(v) + 1; k < q.code.size(); ++k)
      for (int* o : {&q.code[k].a, &q.code[k].b, &q.code[k].c})
        if (*o == v) *o = by;
    for (int& o : q.outputs)
      if (o == v) o = by;
  }
  std::vector<int> outs;
  for (int o : q.outputs)
    if (std::find(outs.begin(), outs.end(), o) == outs.end()) outs.push_back(o);
  q.outputs = outs;
  std::vector<char> keep(q.code.size(), 1);
  keep[static_cast<std::size_t>(v)] = 0;
  return kept(q, keep);
}

bool used(const program& p, int v) {
  for (const instr& i : p.code)
    if (i.a == v || i.b == v || i.c == v) return true;
  return std::find(p.outputs.begin(), p.outputs.end(), v) != p.outputs.end();
}

program shrink(const program& p0, checker& ck, const plan& pl, const std::string& cls, int budget) {
  program best = p0;
  auto fails = [&](const program& q) {
    if (budget-- <= 0) return false;
    const auto refs = ck.references(q);
    for (const auto& r : refs)
      if (r.threw && !r.fg_error) return cls == "eager";
    std::string d = ck.check(q, pl, refs, nullptr);
    return !d.empty() && mismatch_class(d) == cls;
  };
  if (program q = dead_code_eliminated(p0); q.n_values() < best.n_values() && fails(q)) best = q;
  bool progress = true;
  while (progress && budget > 0) {
    progress = false;
    if (best.outputs.size() > 1)
      for (int o : best.outputs) {
        program q = best;
        q.outputs = {o};
        if (fails(q)) {
          best = q;
          progress = true;
          break;
        }
      }
    for (int v = best.n_values() - 1; v >= 0 && budget > 0; --v) {
      const instr& i = best.code[static_cast<std::size_t>(v)];
      if (i.k == op::input) continue;
      bool done = false;
      if (!used(best, v)) {  // an unused value: drop it
        program q = bypassed(best, v, -1);
        if (fails(q)) {
          best = q;
          progress = true;
          break;
        }
      }
      for (int by : {i.a, i.b, i.c}) {
        if (by < 0 || best.shape_of(by) != i.shape) continue;
        program q = bypassed(best, v, by);
        if (q.n_values() < best.n_values() && fails(q)) {
          best = q;
          progress = done = true;
          break;
        }
      }
      if (done) break;
    }
    for (std::size_t k = 0; k < best.inputs.size() && budget > 0; ++k) {
      if (best.inputs[k].specials.empty()) continue;
      program q = best;
      q.inputs[k].specials.clear();
      if (fails(q)) {
        best = q;
        progress = true;
      }
    }
  }
  return best;
}

}  // namespace

/// Graphs whose native code is built together before they are checked (FUSEGRAD_NATIVE=sync).
constexpr long native_block = 24;

/// Runs graphs [first, end) through every path with native code in the background, then waits
/// for the code cache: their kernels are compiled in a few compiler runs (the cache batches
/// what is queued), where compiling each on first use would start the compiler once a kernel.
/// The checks that follow, in mode sync, find every kernel in memory. What this pass sees is
/// not compared; the pass that follows compares everything.
void prebuild_native_code(const options& o, long first, long end) {
  fg::native::set_mode(fg::native::mode::async);
  stats scratch;
  for (long g = first; g < end; ++g) {
    if (g % 8 == 7) fg::compiled_autograd::reset();
    const program p = generate(o.seed, static_cast<std::uint64_t>(g));
    const std::vector<shape_set> sets = make_shape_sets(p);
    checker ck{sets, &scratch.executions, &scratch.masked};
    const std::vector<outcome> refs = ck.references(p);
    int call = -1;
    for (const plan& pl : plans()) (void)ck.check(p, pl, refs, &call);
  }
  fg::detail::native::code_cache::global().wait_idle();
  fg::native::set_mode(fg::native::mode::sync);
  fg::compiled_autograd::reset();  // the checks start from an empty key cache, as without this pass
}

bool run_runtime_fuzz(const options& o, stats& st, double deadline_s) {
  bool ok = true;
  const bool prebuild = fg::native::current_mode() == fg::native::mode::sync;
  for (long g = o.first; o.graphs <= 0 || g < o.first + o.graphs; ++g) {
    if (deadline_s > 0 && elapsed_s() > deadline_s) break;
    if (prebuild && (g - o.first) % native_block == 0)
      prebuild_native_code(o, g, o.graphs <= 0 ? g + native_block : std::min(g + native_block, o.first + o.graphs));
    // Bound the key cache of a long run well below compiled autograd's recompile limit (64
    // keys; a graph adds up to ~6), so that no graph falls back to the eager engine.
    if (g % 8 == 7) fg::compiled_autograd::reset();
    const program p = generate(o.seed, static_cast<std::uint64_t>(g));
    const std::vector<shape_set> sets = make_shape_sets(p);
    checker ck{sets, &st.executions, &st.masked, &st.replays, &st.refused};
    const std::vector<outcome> refs = ck.references(p);
    ++st.graphs;
    const bool invalid = std::all_of(refs.begin(), refs.end(), [](const outcome& r) { return r.threw; });
    st.invalid += invalid;
    if (o.verbose) {
      std::string ops;
      for (const instr& i : p.code)
        if (i.k != op::input) ops += std::string(" ") + op_name(i.k);
      std::printf("graph %ld (seed %llu): %zu instructions, %zu inputs%s:%s\n", g,
                  static_cast<unsigned long long>(p.seed), p.code.size(), p.inputs.size(), invalid ? ", invalid" : "",
                  ops.c_str());
    }
    std::string failure;
    const plan* failing = nullptr;
    int call = -1;
    for (std::size_t s = 0; s < refs.size() && failure.empty(); ++s)
      if (refs[s].threw && !refs[s].fg_error) {
        failure = "eager: " + refs[s].what;
        failing = &eager_plan;
        call = static_cast<int>(s);
      }
    if (failure.empty() && !refs.empty()) {
      const long before = st.fd_checks;
      failure = finite_difference_mismatch(p, sets[0], &st.fd_checks);
      if (!failure.empty()) failing = &eager_plan, call = 0;
      if (o.verbose) std::printf("  finite differences: %s\n", st.fd_checks > before ? "compared" : "skipped");
    }
    for (const plan& pl : plans()) {
      if (!failure.empty()) break;
      failure = ck.check(p, pl, refs, &call);
      if (!failure.empty()) failing = &pl;
    }
    if (failure.empty()) continue;
    ++st.mismatches;
    ok = false;
    std::printf("\n=== MISMATCH in graph %ld of seed %llu, path %s, call %d\n%s\n", g,
                static_cast<unsigned long long>(o.seed), failing->path.name, call, failure.c_str());
    program small = p;
    if (o.shrink && failing != &eager_plan) {
      checker quiet{sets};
      small = shrink(p, quiet, *failing, mismatch_class(failure), 400);
      const auto refs2 = quiet.references(small);
      int call2 = -1;
      const std::string d2 = quiet.check(small, *failing, refs2, &call2);
      if (!d2.empty()) failure = d2, call = call2;
      std::printf("shrunk from %zu to %zu instructions: %s\n", p.code.size(), small.code.size(), failure.c_str());
    }
    std::vector<int> calls(failing->calls.begin(), failing->calls.begin() + std::max(call, 0) + 1);
    if (failing == &eager_plan) calls = {call};
    std::printf("--- reproducer ---\n%s--- end ---\n",
                print_reproducer(small, sets, calls, failing->path, failure).c_str());
    if (!o.keep_going) break;
  }
  return ok;
}

}  // namespace fuzz
