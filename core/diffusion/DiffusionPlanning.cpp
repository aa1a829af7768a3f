#include "diffusion/DiffusionPlanning.h"

#include "config/RunConfigYaml.h"

namespace strata::diffusion {

lora::LoraFileFormat loraFileFormatOf(config::ExportFormat f) {
  switch (f) {
    case config::ExportFormat::Diffusers:
      return lora::LoraFileFormat::Diffusers;
    case config::ExportFormat::Kohya:
      return lora::LoraFileFormat::Kohya;
    case config::ExportFormat::Comfy:
      return lora::LoraFileFormat::Comfy;
    case config::ExportFormat::Peft:  // refused by the families' formatProblem; the diffusers / peft names
      return lora::LoraFileFormat::Diffusers;
  }
  return lora::LoraFileFormat::Diffusers;
}

lora::LoraExportOptions loraExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                          double alpha, const std::string& runYaml, const std::string& softwareVersion,
                                          const std::string& baseModel) {
  lora::LoraExportOptions eo;
  eo.format = loraFileFormatOf(format);
  eo.dtype = train::scalarTypeOf(cfg.save.dtype);
  eo.softwareVersion = softwareVersion;
  eo.baseModel = baseModel;
  eo.title = cfg.job.name;
  eo.rank = cfg.network.linear;
  eo.alpha = alpha;
  eo.steps = steps;
  eo.runYaml = runYaml.empty() ? config::toYaml(cfg) : runYaml;
  return eo;
}

}  // namespace strata::diffusion
