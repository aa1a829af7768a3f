#pragma once
// Shared by the tests that run the Trainer on the CPU (tests/train, tests/families):
// a recorder of the run's events, the settings every tiny CPU run starts from and its
// shapes dataset.
// Header only: include it from a test area that links strata_core.
#include <filesystem>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "config/RunConfig.h"
#include "events/EventBus.h"

namespace strata::test {

// Collects the events of a run (bus.subscribe([&](const events::Event& e) { rec(e); }));
// safe to call from the trainer's threads.
class EventRecorder {
 public:
  void operator()(const events::Event& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    all_.push_back(e);
  }

  // The recorded events of type T, in order.
  template <class T>
  std::vector<T> of() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<T> out;
    for (const auto& e : all_)
      if (auto* p = std::get_if<T>(&e)) out.push_back(*p);
    return out;
  }

  // Why the run did not start or failed: the preflight problems and failure messages.
  std::string failures() const {
    std::string s;
    for (const auto& p : of<events::PreflightFailedEvent>())
      for (const auto& m : p.problems) s += m + "\n";
    for (const auto& f : of<events::FailedEvent>()) s += f.message + "\n";
    return s;
  }

  // Warnings, preflight problems and failures, each line marked with its kind.
  std::string text() const {
    std::string s;
    for (const auto& w : of<events::WarningEvent>()) s += "warning: " + w.message + "\n";
    for (const auto& p : of<events::PreflightFailedEvent>())
      for (const auto& x : p.problems) s += "preflight: " + x + "\n";
    for (const auto& f : of<events::FailedEvent>()) s += "failed: " + f.message + "\n";
    return s;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<events::Event> all_;
};

// A tiny preset on the CPU with random weights: rank 4 / alpha 4, float32, lr 2e-3,
// `steps` steps, no samples, diffusers export, up to 10 step saves kept. The caller
// picks the architecture, dataset, seed and what else it tests.
inline config::RunConfig tinyCpuRun(const std::string& name, const std::filesystem::path& folder, int64_t steps) {
  config::RunConfig c;
  c.job.name = name;
  c.job.trainingFolder = folder.string();
  c.model.preset = "tiny";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cpu;
  c.network.linear = 4;
  c.network.linearAlpha = 4;
  c.train.steps = steps;
  c.train.lr = 2e-3;
  c.train.dtype = config::DType::FP32;
  c.sample.sampleEvery = 0;
  c.sample.prompts = {};
  c.save.maxStepSavesToKeep = 10;
  c.save.exportFormats = {config::ExportFormat::Diffusers};
  return c;
}

// A shapes dataset (drawn by the trainer, captions embedded by word): `items` images of
// `px` pixels.
inline config::DatasetConfig shapesDataset(int64_t px, int64_t items) {
  config::DatasetConfig d;
  d.type = config::DatasetType::Shapes;
  d.resolution = {px};
  d.numItems = items;
  return d;
}

}  // namespace strata::test
