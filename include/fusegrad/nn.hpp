#pragma once
/// \file fusegrad/nn.hpp
/// Neural-network building blocks on eager tensors (docs/eager.md): modules (`linear`,
/// `sequential`), losses, optimizers (`sgd`, `adam`, `rmsprop`) and `.npy` state dicts.

#include "fusegrad/eager.hpp"
#include "fusegrad/nn/linear.hpp"
#include "fusegrad/nn/loss.hpp"
#include "fusegrad/nn/optim.hpp"
#include "fusegrad/nn/sequential.hpp"
#include "fusegrad/nn/state_dict.hpp"
