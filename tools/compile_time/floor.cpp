// The floor of compile time: only what fusegrad's headers include from outside fusegrad
// (dependencies.hpp: the standard library and xsimd). tools/compile_ratios.sh measures TUs
// against it.
#include "dependencies.hpp"

int main() {}
