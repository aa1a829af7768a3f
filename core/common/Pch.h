// Precompiled header for the core and its tests: the heavy LibTorch includes.
// Keep it to headers that almost every core file needs anyway.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/init.h>
#include <torch/autograd.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
