// fg::compile's analysis and plan of the 40-node function, nothing run.
#include "forty.hpp"
using analysis = decltype(fg::compile(forty))::analysis<double, 3>;
static_assert(analysis::MF == 43, "the forward graph has the 40 op nodes and the 3 inputs");
static_assert(analysis::plan<fg::policy::min_cut>.saved_count > 0, "the plan exists");
int main() {}
