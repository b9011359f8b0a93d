// Compiled autograd's cache key: a hit is the same tape structure, not only the same hashes.
// Each node's key is a 64-bit hash; two tapes whose hashes collide (forced here by writing
// one key's hashes over the other's, as a collision would make them) must not share a cached
// key, or the second would run the first one's captured graph.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;
namespace ca = fusegrad::compiled_autograd::detail;

namespace {

struct ca_off {  // every test starts and ends with compiled autograd off, its cache empty
  ca_off() {
    fg::config().compiled_autograd = false;
    fg::compiled_autograd::reset();
  }
  ~ca_off() {
    fg::config().compiled_autograd = false;
    fg::compiled_autograd::reset();
  }
};

/// The key of the tape below `roots`, copied out of the walk's per-thread buffer, hashed (a
/// lookup keeps the hashes a key has: a test can give it a cached key's).
ca::walk_key key_of(const std::vector<fg::tensor<float>>& roots) {
  ca::walk_key k = ca::make_key(roots);
  ca::hash_nodes(k);
  return k;
}

/// `ka` is stored by its first lookup and found by its second; `kb`, equal to it but for what a
/// test changed, is a miss stored as an entry of its own.
void check_two_entries(ca::walk_key& ka, ca::walk_key& kb) {
  ca::cached_key* ca_a = nullptr;
  ca::cached_key* ca_b = nullptr;
  CHECK_FALSE(ca::lookup(ka, &ca_a));
  CHECK(ca::lookup(ka, &ca_a));
  CHECK_FALSE(ca::lookup(kb, &ca_b));
  CHECK(ca_b != ca_a);
}

}  // namespace

TEST_CASE("a key with a cached key's hashes but other node names is a miss") {
  ca_off guard;
  auto x = fg::randn<float>({10}, 1).requires_grad(true);
  const std::vector<fg::tensor<float>> a{fg::sum(fg::exp(x))}, b{fg::sum(fg::tanh(x))};
  ca::walk_key ka = key_of(a);
  ca::walk_key kb = key_of(b);
  REQUIRE(ka.size() == kb.size());
  REQUIRE(ka.sizes == kb.sizes);
  REQUIRE(ka.offsets == kb.offsets);
  REQUIRE(ka.structure != kb.structure);
  kb.structure = ka.structure;  // the collision
  ca::cached_key* ca_a = nullptr;
  ca::cached_key* ca_b = nullptr;
  CHECK_FALSE(ca::lookup(ka, &ca_a));  // stored
  CHECK_FALSE(ca::lookup(kb, &ca_b));  // not served a's key
  CHECK(ca_b != ca_a);
  ca::cached_key* again = nullptr;
  CHECK(ca::lookup(ka, &again));
  CHECK(again == ca_a);
  CHECK(ca::lookup(kb, &again));
  CHECK(again == ca_b);
}

TEST_CASE("a key with a cached key's hashes and names but other edges is a miss") {
  ca_off guard;
  auto x = fg::randn<float>({10}, 1).requires_grad(true);
  const std::vector<fg::tensor<float>> a{fg::sum(fg::exp(x))};
  ca::walk_key ka = key_of(a);
  ca::walk_key kb = ka;
  REQUIRE(kb.words.size() > 2);
  kb.words[2] ^= 1;  // the root's edge to another node (its hashes unchanged: a collision)
  check_two_entries(ka, kb);
}

TEST_CASE("a backward whose key collides with a cached one is captured, not run on the other's plan") {
  ca_off guard;
  fg::compiled_autograd::enable on;
  auto x = fg::randn<float>({10}, 1).requires_grad(true);
  for (int i = 0; i < 2; ++i) {  // the capture, then a hit run on its plan
    x.zero_grad();
    fg::sum(fg::exp(x)).backward();
  }
  fg::reset_counters();
  const std::vector<fg::tensor<float>> b{fg::sum(fg::tanh(x))};
  const ca::walk_key kb = key_of(b);
  {  // the collision: the cached key of exp's tape gets the hashes of tanh's
    auto& st = ca::global_state();
    REQUIRE(st.keys.size() == 1);
    REQUIRE(st.keys.front().sizes == kb.sizes);
    REQUIRE(st.keys.front().offsets == kb.offsets);
    REQUIRE_FALSE(st.keys.front().plans.empty());
    st.keys.front().structure = kb.structure;
  }
  x.zero_grad();
  b.front().backward();
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_hits == 0);
  const std::vector<float> xs = x.to_vector(), g = x.grad().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(g[i] == doctest::Approx(1.0 - std::pow(std::tanh(xs[i]), 2)));
}

TEST_CASE("a hit compares every byte of each node's name") {
  // A hit compares names without hashing them, eight bytes at a time and the last ones in
  // overlapping loads: a name that differs in any one byte is another node.
  for (std::size_t n = 1; n <= 24; ++n)
    for (std::size_t i = 0; i < n; ++i) {
      const std::string a(n, 'a');
      std::string b = a;
      b[i] = 'b';
      CHECK(ca::same_text(a, a));
      CHECK_FALSE(ca::same_text(a, b));
      CHECK_FALSE(ca::same_text(a, std::string_view(b).substr(0, n - 1)));
    }
  ca_off guard;
  auto x = fg::randn<float>({10}, 1).requires_grad(true);
  const std::vector<fg::tensor<float>> a{fg::sum(fg::exp(x))};
  ca::walk_key ka = ca::make_key(a);
  REQUIRE(ka.size() > 1);
  ca::walk_key kb = ka;  // the same words and sizes, one name changed in its middle byte
  std::string other(ka.names[1]);
  REQUIRE(other.size() > 2);
  other[other.size() / 2] ^= 1;
  kb.names[1] = other;
  check_two_entries(ka, kb);
}
