#include "families/flux/FluxFamily.h"

#include "lora/LoraFormats.h"
#include "models/flux/FluxLoraRules.h"
#include "train/TrainerSupport.h"

namespace strata::families {

namespace {

class FluxRun : public train::FamilyRun {
 public:
  // FLUX's data is prepared by the trainer's preflight itself (train/Trainer.cpp).
  void prepareData(train::Trainer::State&, const config::RunConfig&, events::EventBus&) override {}

  void buildAndPlace(train::Trainer::State& st, const config::RunConfig& cfg) override {
    // A checkpoint of FLUX.1-dev's size takes a while to stream in: say how far it is.
    std::function<void(int64_t, int64_t)> progress;
    if (st.bus)
      progress = [bus = st.bus](int64_t done, int64_t total) {
        bus->publish(events::LoadProgressEvent{"transformer", done, total});
      };
    auto built = train::buildPlacedModel(cfg, st.prepared, progress);
    st.model = std::move(built.model);
    st.placement = std::move(built.placement);
    st.devices = built.devices;
    st.planReason = built.reason;
    model_ = st.model;
    rules_ = std::make_unique<flux::FluxLoraRules>(st.fluxConfig);
  }
  torch::nn::Module& module() override { return *model_; }
  const nn::LoraNameRules& loraRules() const override { return *rules_; }

  at::Tensor microStep(train::Trainer::State& st, const config::RunConfig& cfg, int64_t batch, events::EventBus& bus,
                       int64_t step) override {
    return train::microStep(st, cfg, batch, bus, step);
  }
  void sampleAll(train::Trainer::State& st, const config::RunConfig& cfg, const train::RunFolder& folder,
                 int64_t step, events::EventBus& bus) override {
    train::sampleAll(st, cfg, folder, step, bus);
  }
  std::filesystem::path exportLora(train::Trainer::State& st, const config::RunConfig& cfg,
                                   config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                                   const std::string& runYaml, const std::string& softwareVersion) override {
    lora::writeLoraFile(path, *st.network, *rules_,
                        train::exportOptionsOf(cfg, format, step, cfg.network.linearAlpha, runYaml, softwareVersion));
    return path;
  }
  void release() override {
    model_.reset();
    rules_.reset();
  }

 private:
  std::shared_ptr<flux::FluxTransformer> model_;
  std::unique_ptr<flux::FluxLoraRules> rules_;
};

class FluxFamily : public train::ModelFamily {
 public:
  config::ModelArch arch() const override { return config::ModelArch::Flux; }
  std::string displayName() const override { return "FLUX.1"; }
  std::unique_ptr<train::FamilyRun> newRun() const override { return std::make_unique<FluxRun>(); }

  train::RunPlanInput planInput(const config::RunConfig& cfg, int64_t& tokens, std::string& source) const override {
    const auto fc = train::planFluxConfig(cfg.model, &source);
    tokens = train::planTokens(cfg, fc);
    return train::runPlanInput(cfg, fc, tokens);
  }
  double trainStepFlops(const config::RunConfig& cfg) const override {
    return train::trainStepFlops(cfg, train::planFluxConfig(cfg.model));
  }
  std::string checkpointPrefix() const override { return "transformer."; }
  std::string formatProblem(config::ExportFormat format) const override {
    return format == config::ExportFormat::Peft
               ? "peft (an adapter folder) is the causal-LM form; a FLUX LoRA is written as diffusers, kohya or comfy"
               : "";
  }

  void exportModules(const std::vector<lora::LoraModuleWeights>& modules, const config::RunConfig& cfg,
                     config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                     const std::string& softwareVersion) const override {
    const double alpha = modules.empty() ? cfg.network.linearAlpha : modules.front().alpha;
    const flux::FluxLoraRules rules(train::planFluxConfig(cfg.model));
    lora::writeLoraFile(path, modules, rules, train::exportOptionsOf(cfg, format, step, alpha, "", softwareVersion));
  }
};

}  // namespace

std::shared_ptr<const train::ModelFamily> makeFluxFamily() { return std::make_shared<FluxFamily>(); }

}  // namespace strata::families
