// The headers alone.
#include "forty.hpp"
int main() {}
