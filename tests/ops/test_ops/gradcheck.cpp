// test_ops: every differentiable op gradchecked in double over the shape classes.
#include "helpers.hpp"

namespace {

// ---- gradcheck tables -----------------------------------------------------------------
// A case is named by its expression: `x` is the input of unary cases, `a`, `b` of binary ones.
struct case1 {
  const char* name;
  dom d;
  fn1 f;
};
struct case2 {
  const char* name;
  dom da, db;
  fn2 f;
};
#define C1(d, expr)                                       \
  case1 {                                                 \
#expr, dom::d, [](const td& x) -> td { return expr; } \
  }
#define A1(expr) C1(any, expr)
#define C2(da, db, expr)                                                         \
  case2 {                                                                        \
#expr, dom::da, dom::db, [](const td& a, const td& b) -> td { return expr; } \
  }

void run1(const fg::shape& s, const std::vector<case1>& cases) {
  const std::string shape = str(s);
  CAPTURE(shape);
  for (const auto& c : cases) {
    const std::string op = c.name;
    CAPTURE(op);
    GRADCHECK(c.f, input(s, c.d, 7));
  }
}
void run2(const fg::shape& sa, const fg::shape& sb, const std::vector<case2>& cases) {
  const std::string shapes = str(sa) + " with " + str(sb);
  CAPTURE(shapes);
  for (const auto& c : cases) {
    const std::string op = c.name;
    CAPTURE(op);
    GRADCHECK(c.f, input(sa, c.da, 3), input(sb, c.db, 4));
  }
}
/// Unary cases each with its own input shape.
struct shaped {
  case1 c;
  fg::shape s;
};
#define V(expr, ...)                    \
  shaped {                              \
    A1(expr), fg::shape { __VA_ARGS__ } \
  }
void run_shaped(const std::vector<shaped>& cases) {
  for (const auto& c : cases) run1(c.s, {c.c});
}

const std::vector<case1> unary_cases = {
    A1(-x),
    A1(fg::exp(x)),
    C1(pos, fg::log(x)),
    A1(fg::sin(x)),
    A1(fg::cos(x)),
    A1(fg::tanh(x)),
    A1(fg::sigmoid(x)),
    C1(away, fg::relu(x)),
    C1(pos, fg::sqrt(x)),
    C1(away, fg::abs(x)),
    A1(fg::pow(x, 2)),
    A1(fg::pow(x, 3.0)),
    C1(pos, fg::pow(x, 0.5)),
    C1(pos, fg::pow(x, -1.5)),
    C1(away, fg::pow(x, 0.0)),
    A1(x + 2.5),
    A1(2.5 + x),
    A1(x - 2.5),
    A1(2.5 - x),
    A1(x * 2.5),
    A1(2 * x),
    A1(x / 2.5),
    C1(away, 2.5 / x),
    A1(x* x + fg::sin(x)),  // one input used three times: gradients accumulate
};
const std::vector<case2> binary_cases = {
    C2(any, any, a + b),  C2(any, any, a - b),         C2(any, any, a* b),
    C2(any, away, a / b), C2(pos, any, fg::pow(a, b)), C2(any, any, fg::maximum(a, b)),
};

}  // namespace

// =========================================================================================
// gradchecks (double)
// =========================================================================================

TEST_CASE("gradcheck: unary ops and tensor-scalar arithmetic") {
  SUBCASE("scalar (0-d)") { run1({}, unary_cases); }
  SUBCASE("1-element") { run1({1}, unary_cases); }
  SUBCASE("vector") { run1({5}, unary_cases); }
  SUBCASE("matrix") { run1({3, 4}, unary_cases); }
  SUBCASE("3-d") { run1({2, 3, 2}, unary_cases); }
  SUBCASE("empty") {
    run1({0}, unary_cases);
    run1({2, 0}, unary_cases);
  }
}

TEST_CASE("gradcheck: binary tensor-tensor ops") {
  SUBCASE("scalar (0-d)") { run2({}, {}, binary_cases); }
  SUBCASE("1-element") { run2({1}, {1}, binary_cases); }
  SUBCASE("vector") { run2({5}, {5}, binary_cases); }
  SUBCASE("matrix") { run2({3, 4}, {3, 4}, binary_cases); }
  SUBCASE("broadcast") {
    for (const auto& [sa, sb] : std::vector<std::pair<fg::shape, fg::shape>>{{{3, 1}, {1, 4}},
                                                                             {{4}, {2, 3, 4}},
                                                                             {{2, 3, 4}, {4}},
                                                                             {{}, {3}},
                                                                             {{3}, {}},
                                                                             {{1}, {3, 4}},
                                                                             {{2, 1, 4}, {3, 1}}})
      run2(sa, sb, binary_cases);
  }
  SUBCASE("non-contiguous operands") {
    run2({4, 3}, {3, 4}, {C2(any, any, a.t() * b), C2(any, away, a.t() / b.t().t())});
    run2({6}, {3}, {C2(any, away, a.slice(0, 0, 6, 2) / b), C2(any, any, fg::maximum(a.slice(0, 1, 6, 2), b))});
  }
  SUBCASE("empty") {
    for (const auto& [sa, sb] : std::vector<std::pair<fg::shape, fg::shape>>{
             {{0}, {0}}, {{0}, {}}, {{}, {0}}, {{2, 0}, {2, 1}}, {{2, 0}, {0}}, {{1, 0}, {3, 1}}})
      run2(sa, sb, binary_cases);
  }
}

TEST_CASE("gradcheck: reductions sum / mean / max") {
  SUBCASE("scalar (0-d)") {
    run1({}, {A1(fg::sum(x)), A1(fg::sum(x, 0)), A1(fg::sum(x, -1, true)), A1(fg::mean(x)), A1(fg::mean(x, {0}, true)),
              A1(fg::max(x)), A1(fg::max(x, -1, true))});
  }
  SUBCASE("1-element and vector") {
    for (const fg::shape& s : {fg::shape{1}, fg::shape{5}})
      run1(s, {A1(fg::sum(x)), A1(fg::sum(x, {0}, true)), A1(fg::mean(x)), A1(fg::mean(x, -1)), A1(fg::max(x)),
               A1(fg::max(x, 0)), A1(fg::max(x, -1, true))});
  }
  SUBCASE("matrix") {
    run1({3, 4},
         {A1(fg::sum(x)), A1(fg::sum(x, {0}, true)), A1(fg::sum(x, 1)), A1(fg::sum(x, {0, 1})), A1(fg::mean(x)),
          A1(fg::mean(x, {0, 1})), A1(fg::mean(x, 0)), A1(fg::mean(x, -1, true)), A1(fg::max(x)), A1(fg::max(x, 0)),
          A1(fg::max(x, -1, true)), A1(fg::max(x, {1, 0}, true)), A1(fg::sum(x.t(), 1)), A1(fg::max(x.t(), 0))});
  }
  SUBCASE("3-d") {
    run1({2, 3, 4},
         {A1(fg::sum(x, {0, 2})), A1(fg::mean(x, {2, 0}, true)), A1(fg::max(x, {0, 2})), A1(fg::max(x, 1, true))});
  }
  SUBCASE("empty") {
    for (const fg::shape& s : {fg::shape{0}, fg::shape{2, 0}, fg::shape{0, 3}})
      run1(s, {A1(fg::sum(x)), A1(fg::sum(x, 0)), A1(fg::sum(x, -1, true)), A1(fg::mean(x)),  // mean: NaN
               A1(fg::mean(x, {0}, true))});
    // max: fine over non-empty slices of an empty tensor ([2, 0] over dim 0 -> [0]); an
    // empty reduction throws.
    run1({2, 0}, {A1(fg::max(x, 0)), A1(fg::max(x, {0}, true))});
    CHECK(str(fg::max(input({2, 0}), 0).shape()) == "[0]");
    CHECK_THROWS_AS((void)fg::max(input({0})), fg::error);
    CHECK_THROWS_AS((void)fg::max(input({2, 0}), 1), fg::error);
  }
}

TEST_CASE("gradcheck: matmul mm bmm linear") {
  const std::vector<case2> mat = {C2(any, any, fg::matmul(a, b))};
  SUBCASE("1-D . 1-D") {
    run2({4}, {4}, mat);
    run2({1}, {1}, mat);
  }
  SUBCASE("2-D . 1-D and 1-D . 2-D") {
    run2({3, 4}, {4}, mat);
    run2({4}, {4, 3}, mat);
    run2({1, 1}, {1}, mat);
  }
  SUBCASE("2-D . 2-D") {
    run2({3, 4}, {4, 2}, mat);
    run2({1, 1}, {1, 1}, mat);
  }
  SUBCASE("batched, broadcast batch dims") {
    run2({2, 3, 4}, {2, 4, 5}, mat);
    run2({2, 1, 3, 4}, {5, 4, 2}, mat);
    run2({3, 4}, {2, 4, 5}, mat);
    run2({2, 3, 4}, {4}, mat);
    run2({4}, {2, 4, 3}, mat);
  }
  SUBCASE("empty") {
    run2({0}, {0}, mat);           // 0-d zero
    run2({2, 0}, {0, 3}, mat);     // [2, 3] zeros
    run2({0, 3}, {3, 2}, mat);     // [0, 2]
    run2({0, 2, 3}, {3, 4}, mat);  // empty batch
  }
  SUBCASE("mm and bmm") {
    run2({3, 4}, {4, 2}, {C2(any, any, fg::mm(a, b))});
    run2({1, 1}, {1, 1}, {C2(any, any, fg::mm(a, b))});
    run2({2, 0}, {0, 3}, {C2(any, any, fg::mm(a, b))});
    run2({4, 3}, {4, 2}, {C2(any, any, fg::mm(a.t(), b))});
    run2({3, 2}, {3, 3}, {C2(any, any, fg::mm(a, a.t()) * b)});
    run2({2, 3, 4}, {2, 4, 5}, {C2(any, any, fg::bmm(a, b))});
    run2({0, 3, 4}, {0, 4, 5}, {C2(any, any, fg::bmm(a, b))});
  }
  SUBCASE("linear") {
    const fn3 lin = [](const td& x, const td& w, const td& b) { return fg::linear(x, w, b); };
    for (const fg::shape& s : {fg::shape{5}, fg::shape{4, 5}, fg::shape{2, 4, 5}, fg::shape{0, 5}}) {
      const std::string shape = str(s);
      CAPTURE(shape);
      GRADCHECK(lin, input(s), input({3, 5}, dom::any, 2), input({3}, dom::any, 3));
    }
    run2({4, 5}, {3, 5}, {C2(any, any, fg::linear(a, b))});
    run2({1}, {1, 1}, {C2(any, any, fg::linear(a, b))});
  }
}

TEST_CASE("gradcheck: views and copies") {
  SUBCASE("reshape / view") {
    run_shaped({V(x.reshape({2, 6}), 3, 4), V(x.reshape({-1, 2}), 3, 4), V(x.t().reshape({12}), 3, 4),
                V(x.reshape({1})), V(x.reshape({}), 1), V(x.reshape({0, 3}), 0), V(x.view({12}), 3, 4),
                V(x.view({1, 1}))});
  }
  SUBCASE("expand") {
    run_shaped({V(x.expand({3, 4}), 3, 1), V(x.expand({-1, 4}), 3, 1), V(x.expand({2, 3})), V(x.expand({5}), 1),
                V(x.expand({2, 3, 4}), 4), V(x.expand({2, 0}), 0), V(x.expand({3, 0}), 1, 0)});
  }
  SUBCASE("permute / transpose") {
    run_shaped({V(x.permute({2, 0, 1}), 2, 3, 4), V(x.permute({1, 0}), 3, 4), V(x.permute({})), V(x.permute({0}), 1),
                V(x.permute({1, 0}), 2, 0), V(x.transpose(0, 1), 3, 4), V(x.transpose(0, -1), 2, 3, 4),
                V(x.transpose(0, 0)), V(x.t(), 1, 5), V(x.t(), 0, 3)});
  }
  SUBCASE("select / slice (with step)") {
    run_shaped({V(x.select(0, 1), 3, 4), V(x.select(1, -1), 3, 4), V(x.select(0, 2), 5), V(x.select(0, 0), 1),
                V(x.select(0, 1), 2, 0), V(x.slice(0, 1, 9, 3), 10), V(x.slice(1, 0, 4, 2), 3, 4),
                V(x.slice(0, -2, 3), 3, 4), V(x.slice(0, 0, 1), 1), V(x.slice(0, 2, 2), 5), V(x.slice(1, 0, 0), 2, 0),
                V(x.slice(0, 0, 4, 2).slice(1, 1, 3).select(0, 1), 4, 3)});
  }
  SUBCASE("unsqueeze / squeeze") {
    run_shaped({V(x.unsqueeze(0)), V(x.unsqueeze(-1), 5), V(x.unsqueeze(1), 3, 4), V(x.unsqueeze(0), 2, 0),
                V(x.squeeze(0), 1), V(x.squeeze(1), 3, 1, 4), V(x.squeeze(0), 5), V(x.squeeze(0))});
  }
  SUBCASE("cat") {
    run2({2, 3}, {4, 3}, {C2(any, any, fg::cat(std::vector<td>{a, b}, 0))});
    run2({1}, {5}, {C2(any, any, fg::cat(std::vector<td>{a, b}))});
    run2({0}, {0}, {C2(any, any, fg::cat(std::vector<td>{a, b}))});
    run2({2, 2}, {2, 0}, {C2(any, any, fg::cat(std::vector<td>{a, b, a * 2.0}, -1))});
  }
  SUBCASE("contiguous / clone") {
    run_shaped({V(x.t().contiguous(), 3, 4), V(x.slice(0, 0, 5, 2).contiguous(), 5), V(x.contiguous()),
                V(x.clone(), 3, 4), V(fg::clone(x.t()), 2, 3), V(x.clone()), V(x.clone(), 0)});
  }
}
