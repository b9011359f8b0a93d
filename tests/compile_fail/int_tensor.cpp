// Tensors hold float or double only; the concept's name is the diagnostic.
// expect: Element
#include <fusegrad/fusegrad.hpp>
int main() {
  fusegrad::tensor<int> t;
  (void)t;
}
