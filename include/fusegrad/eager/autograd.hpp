#pragma once
/// \file fusegrad/eager/autograd.hpp
/// The tape, whole: autograd nodes (node.hpp), gradient sums (grad_sum.hpp), tensor hooks
/// (hooks.hpp), recording ops with their gradient edges and AccumulateGrad (record.hpp), and
/// the engine that runs a backward pass in reverse topological order (engine.hpp).

#include "fusegrad/eager/grad_sum.hpp"
#include "fusegrad/eager/node.hpp"
#include "fusegrad/eager/hooks.hpp"
#include "fusegrad/eager/record.hpp"
#include "fusegrad/eager/engine.hpp"
