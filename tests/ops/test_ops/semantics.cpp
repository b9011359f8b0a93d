// test_ops: comparisons, step and sign; detach; how gradients split at ties; grad_fn names;
// views sharing storage.
#include "helpers.hpp"

TEST_CASE("comparisons / step / sign: exact values and no gradient") {
  td a = fg::from_vector<double>({-1, 0, 2, 2, 3, -0.5}), b = fg::from_vector<double>({0, 0, 1, 2, 4, -0.5});
  a.requires_grad(true);
  CHECK(fg::gt(a, b).to_vector() == std::vector<double>{0, 0, 1, 0, 0, 0});
  CHECK(fg::ge(a, b).to_vector() == std::vector<double>{0, 1, 1, 1, 0, 1});
  CHECK(fg::lt(a, b).to_vector() == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(fg::le(a, b).to_vector() == std::vector<double>{1, 1, 0, 1, 1, 1});
  CHECK(fg::eq(a, b).to_vector() == std::vector<double>{0, 1, 0, 1, 0, 1});
  CHECK(fg::ne(a, b).to_vector() == std::vector<double>{1, 0, 1, 0, 1, 0});
  CHECK(fg::step(a).to_vector() == std::vector<double>{0, 0, 1, 1, 1, 0});
  CHECK(fg::sign(a).to_vector() == std::vector<double>{-1, 0, 1, 1, 1, -1});
  const td s = fg::scalar_tensor(2.0);
  CHECK(fg::gt(a, s).to_vector() == std::vector<double>{0, 0, 0, 0, 1, 0});  // broadcast 0-d
  CHECK(fg::eq(s, a).to_vector() == std::vector<double>{0, 0, 1, 1, 0, 0});
  for (const td& r : {fg::gt(a, b), fg::ne(a, b), fg::step(a), fg::sign(a)}) {
    CHECK_FALSE(r.requires_grad());
    CHECK(r.grad_fn_name().empty());
  }
  const fg::tensor<float> f = fg::from_vector<float>({-2.f, 0.f, 1.5f});
  CHECK(fg::sign(f).to_vector() == std::vector<float>{-1, 0, 1});
  CHECK(fg::le(f, f).to_vector() == std::vector<float>{1, 1, 1});
  CHECK(std::isnan(fg::sign(fg::from_vector<double>({NAN})).item()));
}

TEST_CASE("detach(x): x's value and no gradient, in eager mode, fg::compile and fg::jit") {
  const td x0 = fg::from_vector<double>({-1.5, 0.25, 3.0, -0.0});
  const auto f = [](auto x) { return fg::sum(x * fg::detach(x)); };  // gradient: detach(x) = x
  const td a = x0.detach().clone().requires_grad(true), b = x0.detach().clone().requires_grad(true),
           c = x0.detach().clone().requires_grad(true);
  const td d = fg::detach(a);
  CHECK(d.to_vector() == x0.to_vector());
  CHECK_FALSE(d.requires_grad());
  f(a).backward();
  fg::compile(f)(b).backward();
  fg::jit([&](const td& x) { return f(x); })(c).backward();
  CHECK(a.grad().to_vector() == x0.to_vector());
  CHECK(b.grad().to_vector() == x0.to_vector());
  CHECK(c.grad().to_vector() == x0.to_vector());
  // The softmax family shifts by a detached max: a row's gradient is y (g - Σ g y) alone, with
  // nothing added at the max's position (the shift's gradient is zero, not rounding noise).
  const td r = fg::from_vector<double>({1.0, 2.0, 2.0, 0.5}).requires_grad(true);
  const td g = fg::from_vector<double>({0.3, -1.0, 2.0, 0.7});
  fg::sum(fg::softmax(r, -1) * g).backward();
  const std::vector<double> y = fg::softmax(fg::from_vector<double>({1.0, 2.0, 2.0, 0.5}), -1).to_vector();
  double gy = 0;
  for (std::size_t i = 0; i < 4; ++i) gy += g.to_vector()[i] * y[i];
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(r.grad().to_vector()[i] == doctest::Approx(y[i] * (g.to_vector()[i] - gy)).epsilon(1e-15));
}

TEST_CASE("gradient values: ties split evenly + only inputs requiring grad get one") {
  td a = fg::from_vector<double>({1, 2, 3}), b = fg::from_vector<double>({1, 5, 0});
  a.requires_grad(true);
  b.requires_grad(true);
  fg::sum(fg::maximum(a, b)).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{0.5, 0, 1});
  CHECK(b.grad().to_vector() == std::vector<double>{0.5, 1, 0});
  td x = fg::from_vector<double>({1, 3, 3, 2}, {2, 2});
  x.requires_grad(true);
  fg::max(x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 0.5, 0});
  x.zero_grad();
  fg::sum(fg::max(x, 1)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 1, 0});
  td c = input({3}), d = input({3}, dom::any, 2);
  c.requires_grad(true);
  fg::sum(c * d).backward();
  CHECK(c.grad().to_vector() == d.to_vector());
  CHECK_FALSE(d.grad().defined());
}

TEST_CASE("grad_fn names") {
  td a = input({3, 4}), b = input({3, 4}, dom::pos, 2);
  const td v = input({4}, dom::any, 3);
  a.requires_grad(true);
  b.requires_grad(true);
  const std::vector<std::pair<td, const char*>> cases = {
      {a + b, "AddBackward0"},
      {a + 1.0, "AddBackward1"},
      {1.0 + a, "AddBackward1"},
      {a - b, "SubBackward0"},
      {a - 1.0, "SubBackward1"},
      {1.0 - a, "RsubBackward1"},
      {a * b, "MulBackward0"},
      {a * 2.0, "MulBackward1"},
      {a * v, "MulBackward0"},
      {a / b, "DivBackward0"},
      {a / 2.0, "DivBackward1"},
      {2.0 / a, "RdivBackward1"},
      {-a, "NegBackward0"},
      {fg::exp(a), "ExpBackward0"},
      {fg::log(b), "LogBackward0"},
      {fg::sin(a), "SinBackward0"},
      {fg::cos(a), "CosBackward0"},
      {fg::tanh(a), "TanhBackward0"},
      {fg::sigmoid(a), "SigmoidBackward0"},
      {fg::relu(a), "ReluBackward0"},
      {fg::sqrt(b), "SqrtBackward0"},
      {fg::abs(a), "AbsBackward0"},
      {fg::pow(a, 2), "PowBackward0"},
      {fg::pow(b, a), "PowBackward1"},
      {fg::maximum(a, b), "MaximumBackward0"},
      {fg::sum(a), "SumBackward0"},
      {fg::sum(a, {0}), "SumBackward1"},
      {fg::sum(a, 1, true), "SumBackward1"},
      {fg::mean(a), "MeanBackward0"},
      {fg::mean(a, {0, 1}), "MeanBackward1"},
      {fg::max(a), "MaxBackward1"},
      {fg::max(a, -1, true), "MaxBackward0"},
      {fg::mm(a, b.t()), "MmBackward0"},
      {fg::matmul(a, b.t()), "MmBackward0"},
      {fg::bmm(a.unsqueeze(0), b.t().unsqueeze(0)), "BmmBackward0"},
      {fg::linear(a, b, v.slice(0, 0, 3)), "LinearBackward0"},
      {a.reshape({12}), "ViewBackward0"},
      {a.view({4, 3}), "ViewBackward0"},
      {a.select(0, 0).expand({2, 4}), "ExpandBackward0"},
      {a.permute({1, 0}), "PermuteBackward0"},
      {a.transpose(0, 1), "TransposeBackward0"},
      {a.select(1, 2), "SelectBackward0"},
      {a.slice(0, 0, 3, 2), "SliceBackward0"},
      {a.unsqueeze(0), "UnsqueezeBackward0"},
      {a.unsqueeze(0).squeeze(0), "SqueezeBackward1"},
      {fg::cat(std::vector<td>{a, b}), "CatBackward0"},
      {a.t().contiguous(), "CloneBackward0"},
      {a.clone(), "CloneBackward0"},
  };
  for (const auto& c : cases) {
    const std::string_view name = c.second;  // not a structured binding: CAPTURE uses it in a lambda (clang 14)
    CAPTURE(name);
    CHECK(c.first.grad_fn_name() == name);
  }
  {
    fg::no_grad guard;
    CHECK(fg::cos(a).grad_fn_name().empty());
    CHECK_FALSE((a * b).requires_grad());
  }
  CHECK((v * v).grad_fn_name().empty());  // no input requires grad
  CHECK(a.contiguous().is_same(a));       // already contiguous: no copy, no node
}

TEST_CASE("views share storage + to_vector of strided views") {
  std::vector<double> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0);
  const td x = fg::view_of(buf.data(), {3, 4});
  CHECK(x.data_ptr() == buf.data());
  const td row = x.select(0, 1), col = x.select(1, -2), sl = x.slice(1, 1, 4, 2), tr = x.transpose(0, 1);
  CHECK(row.data_ptr() == buf.data() + 4);
  CHECK(row.to_vector() == std::vector<double>{4, 5, 6, 7});
  CHECK(col.data_ptr() == buf.data() + 2);
  CHECK(col.strides() == fg::strides{4});
  CHECK(col.to_vector() == std::vector<double>{2, 6, 10});
  CHECK(sl.data_ptr() == buf.data() + 1);
  CHECK(str(sl.shape()) == "[3, 2]");
  CHECK(sl.strides() == fg::strides{4, 2});
  CHECK(sl.to_vector() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK(x.slice(0, 0, 3, 2).to_vector() == std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(tr.data_ptr() == buf.data());
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.to_vector() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(x.permute({1, 0}).to_vector() == tr.to_vector());
  const td ex = row.unsqueeze(0).expand({2, 4});
  CHECK(ex.strides() == fg::strides{0, 1});  // the expanded dim has stride 0
  CHECK(ex.data_ptr() == buf.data() + 4);
  CHECK(ex.to_vector() == std::vector<double>{4, 5, 6, 7, 4, 5, 6, 7});
  CHECK(x.reshape({2, 6}).data_ptr() == buf.data());  // contiguous: a view
  CHECK(x.view({12}).data_ptr() == buf.data());
  CHECK(x.unsqueeze(1).squeeze(1).data_ptr() == buf.data());
  CHECK(x.contiguous().data_ptr() == buf.data());
  CHECK(tr.reshape({12}).data_ptr() != buf.data());  // non-contiguous: a copy
  CHECK(x.clone().data_ptr() != buf.data());
  const td cl = x.clone(), ct = tr.contiguous();
  buf[5] = 100;  // writes to the user's memory show through every view, not the copies
  CHECK(row.at({1}) == 100);
  CHECK(tr.at({1, 1}) == 100);
  CHECK(sl.at({1, 0}) == 100);
  CHECK(ex.at({1, 1}) == 100);
  CHECK(cl.at({1, 1}) == 5);
  CHECK(ct.at({1, 1}) == 5);
  col.data_ptr()[4] = -1;  // col[1] is element 2 + 4 of the base
  CHECK(buf[6] == -1);
  CHECK(x.at({1, 2}) == -1);
  CHECK(fg::cat(std::vector<td>{row, col}, 0).to_vector() == std::vector<double>{4, 100, -1, 7, 2, -1, 10});
}
