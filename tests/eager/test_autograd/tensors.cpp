// test_autograd: tensor basics (factories, storage sharing, shapes, broadcasting), grad_fn
// names and the graph's edges.
#include "helpers.hpp"

// =======================================================================================
// Tensor basics
// =======================================================================================

TEST_CASE("factories: zeros, ones, full, arange, scalar_tensor") {
  const auto z = fg::zeros<float>({2, 3});
  CHECK(z.shape() == shp({2, 3}));
  CHECK(z.numel() == 6);
  CHECK(z.dim() == 2);
  CHECK(z.is_contiguous());
  check_all(z, 0.0f);

  const auto o = fg::ones<double>({4});
  CHECK(o.shape() == shp({4}));
  check_all(o, 1.0);

  const auto f = fg::full<float>({3, 1, 2}, 2.5f);
  CHECK(f.shape() == shp({3, 1, 2}));
  CHECK(f.numel() == 6);
  check_all(f, 2.5f);

  const auto a = fg::arange<float>(5);
  CHECK(a.shape() == shp({5}));
  check_values(a, {0, 1, 2, 3, 4});
  CHECK(fg::arange<float>(0).numel() == 0);

  const auto s = fg::scalar_tensor<float>(7.0f);
  CHECK(s.dim() == 0);
  CHECK(s.shape().empty());
  CHECK(s.numel() == 1);
  CHECK(s.item() == 7.0f);

  // A size-0 dim is allowed and gives an empty tensor.
  const auto e = fg::zeros<float>({2, 0, 3});
  CHECK(e.numel() == 0);
  CHECK(e.to_vector().empty());

  // Fresh tensors are leaves that do not require grad.
  CHECK(z.is_leaf());
  CHECK_FALSE(z.requires_grad());
  CHECK(z.grad_fn() == nullptr);
  CHECK(z.grad_fn_name().empty());
}

TEST_CASE("factories: randn is deterministic per seed") {
  const auto a = fg::randn<float>({4, 5}, 42);
  const auto b = fg::randn<float>({4, 5}, 42);
  const auto c = fg::randn<float>({4, 5}, 43);
  CHECK(a.shape() == shp({4, 5}));
  CHECK(a.to_vector() == b.to_vector());  // same seed -> bit-identical
  CHECK(a.to_vector() != c.to_vector());  // different seed -> different numbers
  CHECK_FALSE(a.is_same(b));              // but distinct tensors

  // Roughly standard normal: the sample mean of many values is near 0, variance near 1.
  const auto big = fg::randn<double>({10000}, 7);
  double m = 0, v = 0;
  for (double x : big.to_vector()) m += x;
  m /= 10000;
  for (double x : big.to_vector()) v += (x - m) * (x - m);
  v /= 10000;
  CHECK(std::abs(m) < 0.05);
  CHECK(std::abs(v - 1.0) < 0.05);

  // Odd element counts work too (Box-Muller makes values in pairs).
  CHECK(fg::randn<float>({3}, 1).to_vector() == fg::randn<float>({3}, 1).to_vector());
}

TEST_CASE("from_vector copies its input") {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  const auto t = fg::from_vector<float>(v, {2, 3});
  CHECK(t.shape() == shp({2, 3}));
  CHECK(t.at({0, 0}) == 1.0f);
  CHECK(t.at({1, 2}) == 6.0f);
  CHECK(t.at({1, 0}) == 4.0f);
  v[0] = 100;  // the tensor holds a copy
  CHECK(t.at({0, 0}) == 1.0f);

  const auto one_d = fg::from_vector<double>({3.0, 4.0});
  CHECK(one_d.shape() == shp({2}));
  check_values(one_d, {3.0, 4.0});
}

TEST_CASE("view_of is zero-copy over user memory") {
  float buf[6] = {0, 1, 2, 3, 4, 5};
  auto t = fg::view_of(buf, {2, 3});
  CHECK(t.shape() == shp({2, 3}));
  CHECK(t.data() == buf);  // same memory, no copy
  CHECK(t.at({1, 1}) == 4.0f);

  buf[4] = 40.0f;  // writes to the array are visible through the tensor
  CHECK(t.at({1, 1}) == 40.0f);
  CHECK(t.to_vector()[4] == 40.0f);

  t.data()[5] = -1.0f;  // writes through data() change the array
  CHECK(buf[5] == -1.0f);

  // A view of the tensor (transpose) still reads the same memory.
  const auto tt = t.t();
  buf[1] = 11.0f;
  CHECK(tt.at({1, 0}) == 11.0f);

  // Gradients work on a view_of leaf; the user's array is untouched by backward.
  double dbuf[3] = {1.0, 2.0, 3.0};
  auto x = fg::view_of(dbuf, {3}).requires_grad(true);
  fg::sum(x * x).backward();
  check_values(x.grad(), {2.0, 4.0, 6.0});
  CHECK(dbuf[0] == 1.0);
  CHECK(dbuf[2] == 3.0);
}

TEST_CASE("copying a tensor shares storage and identity (like LibTorch)") {
  auto a = fg::zeros<float>({3});
  auto b = a;  // a copy is a second handle to the same tensor
  CHECK(b.is_same(a));
  CHECK(b.data() == a.data());
  b.data()[1] = 5.0f;
  CHECK(a.at({1}) == 5.0f);

  b.requires_grad(true);  // autograd state is shared too
  CHECK(a.requires_grad());

  fg::sum(a * 3.0f).backward();
  REQUIRE(b.grad().defined());
  check_values(b.grad(), {3.0f, 3.0f, 3.0f});

  // clone() is a real copy: new storage, new identity.
  const auto c = fg::ones<float>({2}).clone();
  auto d = c.clone();
  CHECK_FALSE(d.is_same(c));
  CHECK(d.data() != c.data());
  d.data()[0] = 9.0f;
  CHECK(c.at({0}) == 1.0f);

  // An undefined tensor is a tensor with no data.
  fg::tensor<float> u;
  CHECK_FALSE(u.defined());
}

TEST_CASE("shape, numel, item, to_vector, at") {
  const auto t = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(t.shape() == shp({3, 2}));
  CHECK(t.numel() == 6);
  CHECK(t.size(0) == 3);
  CHECK(t.size(-1) == 2);
  CHECK(t.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});

  // to_vector() of a strided view is in the view's row-major order.
  const auto tt = t.t();
  CHECK(tt.shape() == shp({2, 3}));
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.to_vector() == std::vector<float>{1, 3, 5, 2, 4, 6});
  CHECK(tt.contiguous().is_contiguous());
  CHECK(tt.contiguous().to_vector() == std::vector<float>{1, 3, 5, 2, 4, 6});

  // item() works for shape {1}, 0-d and for a one-element strided view.
  CHECK(fg::full<float>({1}, 3.0f).item() == 3.0f);
  CHECK(fg::full<float>({1, 1, 1}, -2.0f).item() == -2.0f);
  CHECK(fg::scalar_tensor<double>(0.25).item() == 0.25);
  CHECK(t.select(0, 2).select(0, 1).item() == 6.0f);
  CHECK(t.slice(0, 1, 2).slice(1, 0, 1).item() == 3.0f);
}

TEST_CASE("broadcasting shapes and values") {
  const auto a = fg::ones<float>({2, 1, 3});
  const auto b = fg::ones<float>({4, 1});
  CHECK((a + b).shape() == shp({2, 4, 3}));
  CHECK((b + a).shape() == shp({2, 4, 3}));
  CHECK((fg::ones<float>({3}) * fg::ones<float>({2, 3})).shape() == shp({2, 3}));
  CHECK((fg::scalar_tensor<float>(2.0f) * fg::ones<float>({2, 3})).shape() == shp({2, 3}));
  CHECK((fg::ones<float>({1}) - fg::ones<float>({5})).shape() == shp({5}));
  CHECK((fg::ones<float>({0, 3}) + fg::ones<float>({3})).shape() == shp({0, 3}));

  // Values: row [10, 20, 30] added to the column [[1], [2]].
  const auto row = fg::from_vector<float>({10, 20, 30});
  const auto col = fg::from_vector<float>({1, 2}, {2, 1});
  const auto s = row + col;
  CHECK(s.shape() == shp({2, 3}));
  check_values(s, {11, 21, 31, 12, 22, 32});
  check_values(col - row, {-9, -19, -29, -8, -18, -28});

  // Gradients of broadcast operands are summed over the broadcast dims:
  // y = sum(a * b), a [2, 3], b [3] -> da = b (per row), db[j] = sum_i a[i][j].
  auto x = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad(true);
  auto w = fg::from_vector<float>({1, -1, 2}).requires_grad(true);
  fg::sum(x * w).backward();
  check_values(x.grad(), {1, -1, 2, 1, -1, 2});
  check_values(w.grad(), {5, 7, 9});
  CHECK(w.grad().shape() == shp({3}));

  // Broadcasting a size-1 dim: p [2, 1] + q [1, 3] -> grads sum over the other dim.
  auto p = fg::from_vector<float>({1, 2}, {2, 1}).requires_grad(true);
  auto q = fg::from_vector<float>({1, 2, 3}, {1, 3}).requires_grad(true);
  fg::sum((p + q) * (p + q)).backward();
  // d/dp_i = sum_j 2 (p_i + q_j);  d/dq_j = sum_i 2 (p_i + q_j)
  check_values(p.grad(), {2 * ((1 + 1) + (1 + 2) + (1 + 3)), 2 * ((2 + 1) + (2 + 2) + (2 + 3))});
  check_values(q.grad(), {2 * ((1 + 1) + (2 + 1)), 2 * ((1 + 2) + (2 + 2)), 2 * ((1 + 3) + (2 + 3))});
  CHECK(p.grad().shape() == shp({2, 1}));
  CHECK(q.grad().shape() == shp({1, 3}));
}

// =======================================================================================
// grad_fn names
// =======================================================================================

TEST_CASE("grad_fn names follow PyTorch") {
  auto x = fg::from_vector<float>({0.5f, 1.0f, 2.0f}).requires_grad(true);
  auto y = fg::from_vector<float>({1.0f, 2.0f, 3.0f}).requires_grad(true);

  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  CHECK(x.grad_fn_name() == "");

  CHECK((x + y).grad_fn_name() == "AddBackward0");
  CHECK((x - y).grad_fn_name() == "SubBackward0");
  CHECK((x * y).grad_fn_name() == "MulBackward0");
  CHECK((x / y).grad_fn_name() == "DivBackward0");
  CHECK((-x).grad_fn_name() == "NegBackward0");
  CHECK(fg::neg(x).grad_fn_name() == "NegBackward0");
  CHECK(fg::cos(x).grad_fn_name() == "CosBackward0");
  CHECK(fg::sin(x).grad_fn_name() == "SinBackward0");
  CHECK(fg::exp(x).grad_fn_name() == "ExpBackward0");
  CHECK(fg::log(x).grad_fn_name() == "LogBackward0");
  CHECK(fg::tanh(x).grad_fn_name() == "TanhBackward0");
  CHECK(fg::sigmoid(x).grad_fn_name() == "SigmoidBackward0");
  CHECK(fg::relu(x).grad_fn_name() == "ReluBackward0");
  CHECK(fg::sqrt(x).grad_fn_name() == "SqrtBackward0");
  CHECK(fg::abs(x).grad_fn_name() == "AbsBackward0");
  CHECK(fg::pow(x, 3).grad_fn_name() == "PowBackward0");
  CHECK(fg::pow(x, y).grad_fn_name() == "PowBackward1");
  CHECK(fg::maximum(x, y).grad_fn_name() == "MaximumBackward0");
  CHECK(fg::sum(x).grad_fn_name() == "SumBackward0");
  CHECK(fg::sum(x, 0).grad_fn_name() == "SumBackward1");
  CHECK(fg::mean(x).grad_fn_name() == "MeanBackward0");
  CHECK(fg::mean(x, 0).grad_fn_name() == "MeanBackward1");
  CHECK(fg::max(x).grad_fn_name() == "MaxBackward1");
  CHECK(fg::max(x, 0).grad_fn_name() == "MaxBackward0");
  // Scalar overloads are LibTorch's Scalar variants.
  CHECK((x * 2.0f).grad_fn_name() == "MulBackward1");
  CHECK((x + 2.0f).grad_fn_name() == "AddBackward1");
  CHECK((x - 2.0f).grad_fn_name() == "SubBackward1");
  CHECK((2.0f - x).grad_fn_name() == "RsubBackward1");
  CHECK((x / 2.0f).grad_fn_name() == "DivBackward1");

  // Layout ops.
  auto m = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad(true);
  CHECK(x.expand({2, 3}).grad_fn_name() == "ExpandBackward0");
  CHECK(m.view({3, 2}).grad_fn_name() == "ViewBackward0");
  CHECK(m.reshape({6}).grad_fn_name() == "ViewBackward0");  // contiguous: a view
  CHECK(m.t().grad_fn_name() == "TransposeBackward0");
  CHECK(m.transpose(0, 1).grad_fn_name() == "TransposeBackward0");
  CHECK(m.permute({1, 0}).grad_fn_name() == "PermuteBackward0");
  CHECK(m.select(0, 1).grad_fn_name() == "SelectBackward0");
  CHECK(m.slice(1, 0, 2).grad_fn_name() == "SliceBackward0");
  CHECK(m.unsqueeze(0).grad_fn_name() == "UnsqueezeBackward0");
  CHECK(m.unsqueeze(0).squeeze(0).grad_fn_name() == "SqueezeBackward1");
  CHECK(m.clone().grad_fn_name() == "CloneBackward0");
  CHECK(m.t().contiguous().grad_fn_name() == "CloneBackward0");
  CHECK(fg::cat(std::vector{m, m}, 0).grad_fn_name() == "CatBackward0");
  CHECK(fg::mm(m, m.t()).grad_fn_name() == "MmBackward0");
  CHECK(fg::matmul(m, m.t()).grad_fn_name() == "MmBackward0");
  CHECK(fg::bmm(m.unsqueeze(0), m.t().unsqueeze(0)).grad_fn_name() == "BmmBackward0");

  // A non-leaf is not a leaf; results of inputs that don't require grad have no grad_fn.
  const auto r = x * y;
  CHECK_FALSE(r.is_leaf());
  CHECK(r.requires_grad());
  const auto plain = fg::ones<float>({3}) * fg::ones<float>({3});
  CHECK(plain.is_leaf());
  CHECK_FALSE(plain.requires_grad());
  CHECK(plain.grad_fn_name().empty());
}

TEST_CASE("the graph's edges reach AccumulateGrad for leaves") {
  auto x = fg::ones<float>({3}).requires_grad(true);
  const auto c = fg::ones<float>({3});  // does not require grad
  const auto y = x * c;

  const auto acc = fg::detail::grad_accumulator(x);
  REQUIRE(acc != nullptr);
  CHECK(acc->name() == "AccumulateGrad");
  CHECK(fg::detail::grad_accumulator(x) == acc);  // made once, then reused

  const auto& edges = y.grad_fn()->next_edges();
  REQUIRE(edges.size() == 2);
  REQUIRE(edges[0].valid());
  CHECK(edges[0].fn == acc);  // x's gradient goes to its AccumulateGrad
  CHECK(edges[0].fn->name() == "AccumulateGrad");
  CHECK_FALSE(edges[1].valid());  // c needs no gradient

  // Two ops deep: cos(x * 2) -> CosBackward0 -> MulBackward1 -> AccumulateGrad.
  const auto z = fg::cos(x * 2.0f);
  REQUIRE(z.grad_fn()->next_edges().size() == 1);
  const auto& mul = z.grad_fn()->next_edges()[0].fn;
  REQUIRE(mul != nullptr);
  CHECK(mul->name() == "MulBackward1");
  REQUIRE(mul->next_edges().size() == 1);
  CHECK(mul->next_edges()[0].fn == acc);

  // AccumulateGrad knows its variable.
  auto* ag = dynamic_cast<fg::detail::accumulate_grad<float>*>(acc.get());
  REQUIRE(ag != nullptr);
  CHECK(ag->variable().is_same(x));
}
