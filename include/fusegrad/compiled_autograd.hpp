#pragma once
/// \file fusegrad/compiled_autograd.hpp
/// Compiled autograd (docs/compiled_autograd.md): `fg::config().compiled_autograd` and the
/// `enable`/`disable` scopes, with the eager tensors whose backwards it captures and
/// `fg::jit`, whose graph breaks and logs it shares.

#include "fusegrad/compiled_autograd/compiled_autograd.hpp"
#include "fusegrad/eager.hpp"
#include "fusegrad/jit.hpp"

// the precompiled runtime's compiled-autograd part (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime/compiled_autograd.hpp"
