// `strata-train sample MODEL|CONFIG --prompt TEXT [--prompt ...] --out PNG [...]`:
// FLUX.1 or FLUX.2 text-to-image through the generic image path
// (diffusion::generateImages with the pieces of the family's pipeline:
// families/flux's FluxPipeline, families/flux2's Flux2Pipeline), optionally with a
// LoRA file. MODEL is a diffusers folder (model_index.json says which family) or a
// BFL transformer file: then --vae, --clip, --t5 and --tokenizer name FLUX.1's
// other files, --vae and --text-encoder FLUX.2's. A .yaml/.yml run config gives
// model.* instead.
// Progress per step on stderr; the prompt and seed go into the PNG's text chunks.
// Exit codes (Commands.h): 0 written, 1 sampling or writing failed, 2 bad input.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CliChecks.h"
#include "Commands.h"
#include "common/Error.h"
#include "common/Text.h"
#include "common/Version.h"
#include "config/RunConfigYaml.h"
#include "io/Image.h"
#include "models/clip/ClipCheckpoint.h"
#include "diffusion/GenerateImages.h"
#include "families/flux/FluxPipeline.h"
#include "families/flux2/Flux2Pipeline.h"
#include "train/StopSignals.h"

namespace fs = std::filesystem;

namespace strata::cli {

namespace {

struct SampleArgs {
  std::string model;
  std::string vae, clip, t5, tokenizer;  // FLUX.1's single files
  std::string textEncoder;               // FLUX.2's text encoder folder (with single files)
  bool distilled = false;                // FLUX.2 [klein] step-distilled, with single files
  std::vector<std::string> prompts;
  std::string negativePrompt;
  std::string lora;
  double loraMultiplier = 1.0;
  uint64_t seed = 0;
  int64_t steps = 0;  // 0: the family's default
  double guidance = 0.0;
  bool guidanceGiven = false;  // else the family's default
  int64_t width = 1024;
  int64_t height = 1024;
  int64_t maxSequenceLength = 512;
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string out;
};

// Ctrl-C between two sampling steps: the images are not written.
struct Interrupted {
  int64_t step;
};

// Everything that can be said about --out before minutes of loading: a .png name
// in a folder that exists and can be written, not an existing folder.
void checkOutput(const fs::path& out) {
  if (out.empty()) throw ConfigError("--out: no output PNG given");
  if (toLowerAscii(out.extension().string()) != ".png")
    throw ConfigError("--out: '" + out.string() + "' is not a .png file name");
  std::error_code ec;
  if (fs::is_directory(out, ec)) throw ConfigError("--out: '" + out.string() + "' is a folder; give a file name");
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(dir, ec)) throw ConfigError("--out: the folder '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw ConfigError("--out: the folder '" + dir.string() + "' is not writable");
}

// out.png for one prompt; out_0.png, out_1.png, ... for several.
fs::path outputPath(const fs::path& out, size_t index, size_t count) {
  if (count == 1) return out;
  return out.parent_path() / (out.stem().string() + "_" + std::to_string(index) + out.extension().string());
}

bool isRunConfig(const fs::path& p) {
  const auto ext = toLowerAscii(p.extension().string());
  return ext == ".yaml" || ext == ".yml";
}

// The run config of a .yaml MODEL, its errors refused.
config::RunConfig runConfigOf(const fs::path& path) {
  config::LoadedConfig loaded = config::loadRunConfig(path);
  for (const auto& p : loaded.problems)
    if (p.isError()) throw ConfigError(p.format());
  return loaded.config;
}

// Which family MODEL is: a run config says (model.arch); a diffusers folder's
// model_index.json names its pipeline; a single transformer file comes with
// FLUX.2's --text-encoder or FLUX.1's --clip / --t5.
enum class ImageFamily { Flux, Flux2 };

ImageFamily familyOf(const SampleArgs& a) {
  const fs::path model = a.model;
  if (isRunConfig(model)) {
    const auto arch = runConfigOf(model).model.arch;
    if (arch == "flux") return ImageFamily::Flux;
    if (arch == "flux2") return ImageFamily::Flux2;
    throw ConfigError(model.string() + ": model.arch is " + arch +
                      "; strata-train sample draws FLUX.1 and FLUX.2 images (a causal LM's samples are written by "
                      "its run)");
  }
  std::error_code ec;
  if (fs::is_directory(model, ec))
    return families::isFlux2PipelineFolder(model) ? ImageFamily::Flux2 : ImageFamily::Flux;
  return a.textEncoder.empty() ? ImageFamily::Flux : ImageFamily::Flux2;
}

// Options that belong to the other family are refused, not ignored.
void checkFamilyOptions(const SampleArgs& a, ImageFamily family) {
  if (family == ImageFamily::Flux2) {
    for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--clip", &a.clip},
                                      {"--t5", &a.t5},
                                      {"--tokenizer", &a.tokenizer}})
      if (!value->empty())
        throw ConfigError(std::string(flag) + ": FLUX.1's file; a FLUX.2 model takes --vae and --text-encoder");
    return;
  }
  if (!a.textEncoder.empty())
    throw ConfigError("--text-encoder: FLUX.2's text encoder; a FLUX.1 model takes --clip, --t5 and --tokenizer");
  if (a.distilled) throw ConfigError("--distilled: FLUX.2 [klein]'s; a FLUX.1 model has no such choice");
  if (!a.negativePrompt.empty())
    throw ConfigError("--negative-prompt: FLUX.1 samples without a negative pass (FLUX.2 [klein] base uses one)");
}

families::PipelineFiles fluxFilesOf(const SampleArgs& a) {
  const fs::path model = a.model;
  if (isRunConfig(model)) {
    const auto m = runConfigOf(model).model;
    // The command line wins over the config for the single files.
    auto f = families::PipelineFiles::fromModelPaths(
        m.nameOrPath, a.vae.empty() ? m.vaePath : a.vae, a.clip.empty() ? m.clipPath : a.clip,
        a.t5.empty() ? m.t5Path : a.t5, a.tokenizer.empty() ? m.tokenizerPath : a.tokenizer);
    // What single files do not hold, as the run's config gives it (docs/pipeline.md).
    if (!m.axesDimsRope.empty()) f.axesDimsRope = m.axesDimsRope;
    if (m.vaeNormNumGroups) f.vaeHints.normNumGroups = *m.vaeNormNumGroups;
    if (m.clipNumAttentionHeads && fs::is_regular_file(f.text.clip))
      f.text.clipConfig = clip::ClipCheckpoint::open(f.text.clip).config(*m.clipNumAttentionHeads);
    return f;
  }
  return families::PipelineFiles::fromModelPaths(model, a.vae, a.clip, a.t5, a.tokenizer);
}

families::Flux2PipelineFiles flux2FilesOf(const SampleArgs& given) {
  SampleArgs a = given;
  fs::path model = a.model;
  config::ModelConfig m;  // a run config's model section (what single files do not hold)
  if (isRunConfig(model)) {
    m = runConfigOf(model).model;
    if (m.nameOrPath.empty()) throw ConfigError(model.string() + ": model.name_or_path: no FLUX.2 model given");
    model = m.nameOrPath;
    // The run's single files (model.vae_path, model.text_encoder_path, model.distilled); the command line wins.
    if (a.vae.empty()) a.vae = m.vaePath;
    if (a.textEncoder.empty()) a.textEncoder = m.textEncoderPath;
    a.distilled = a.distilled || m.distilled;
  }
  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    if (!a.vae.empty() || !a.textEncoder.empty())
      throw ConfigError("--vae / --text-encoder: " + model.string() +
                        " is a diffusers folder, which holds both; give them with a single transformer file");
    if (a.distilled)
      throw ConfigError("--distilled: " + model.string() + "'s model_index.json says whether it is (is_distilled)");
    return families::Flux2PipelineFiles::fromDiffusersFolder(model);
  }
  if (a.vae.empty()) throw ConfigError("--vae: a single FLUX.2 transformer file needs flux2-vae.safetensors");
  if (a.textEncoder.empty())
    throw ConfigError("--text-encoder: a single FLUX.2 transformer file needs the text encoder's folder");
  auto f = families::Flux2PipelineFiles::fromSingleFiles(
      model, a.vae, families::Flux2TextEncoderFiles::fromTransformersFolder(a.textEncoder));
  f.distilled = a.distilled;
  if (!m.axesDimsRope.empty()) f.axesDimsRope = m.axesDimsRope;
  if (m.vaeNormNumGroups) f.vaeHints.normNumGroups = *m.vaeNormNumGroups;
  return f;
}

at::ScalarType dtypeOf(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw ConfigError("--dtype: '" + name + "' is not float32 or bfloat16");
}

// One family's pipeline as the generic image path takes it, and what keeps it alive.
struct ImagePipeline {
  std::shared_ptr<void> owner;
  diffusion::TextEncoder* text = nullptr;
  diffusion::LatentCodec* codec = nullptr;
  diffusion::Denoiser denoiser;
  int64_t defaultSteps = 28;
  double defaultGuidance = 3.5;
};

struct LoadSettings {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  int64_t maxSequenceLength = 512;
};

ImagePipeline loadFlux(const families::PipelineFiles& files, const LoadSettings& s) {
  families::PipelineOptions o;
  o.device = s.device;
  o.transformerDtype = o.text.t5Dtype = s.dtype;
  o.text.maxSequenceLength = s.maxSequenceLength;
  auto pipe = families::FluxPipeline::load(files, o);
  ImagePipeline p;
  p.text = &pipe->textEncoder();
  p.codec = &pipe->codec();
  p.denoiser = pipe->denoiser();
  p.owner = pipe;
  return p;  // FLUX.1-dev: 28 steps at 3.5
}

ImagePipeline loadFlux2(const families::Flux2PipelineFiles& files, const LoadSettings& s) {
  families::Flux2PipelineOptions o;
  o.device = s.device;
  o.transformerDtype = o.text.dtype = s.dtype;
  o.text.maxSequenceLength = s.maxSequenceLength;
  auto pipe = families::Flux2Pipeline::load(files, o);
  ImagePipeline p;
  p.text = &pipe->textEncoder();
  p.codec = &pipe->codec();
  p.denoiser = pipe->denoiser();
  // Flux2Pipeline's defaults: 50 steps at 4; a step-distilled [klein] is made for 4 steps.
  p.defaultSteps = pipe->guidanceMode() == flux2::Flux2GuidanceMode::None ? 4 : 50;
  p.defaultGuidance = 4.0;
  p.owner = pipe;
  return p;
}

int runSample(const SampleArgs& a) {
  const char* kWho = "strata-train sample: ";
  ImageFamily family = ImageFamily::Flux;
  families::PipelineFiles fluxFiles;
  families::Flux2PipelineFiles flux2Files;
  LoadSettings settings;
  try {
    checkOutput(a.out);
    if (a.guidanceGiven && (!std::isfinite(a.guidance) || a.guidance < 0 || a.guidance > 100))
      throw ConfigError("--guidance: give a number from 0 to 100 (FLUX.1-dev: about 3.5, FLUX.2: about 4)");
    if (!std::isfinite(a.loraMultiplier) || std::fabs(a.loraMultiplier) > 100)
      throw ConfigError("--lora-scale: give a number from -100 to 100 (1 = as trained)");
    if (!a.lora.empty() && !fs::is_regular_file(a.lora)) throw ConfigError("--lora: '" + a.lora + "' is not a file");
    if (a.device == "cuda") {
      settings.device = at::Device(at::kCUDA);
    } else if (a.device != "cpu") {
      throw ConfigError("--device: '" + a.device + "' is not cpu or cuda");
    }
    settings.dtype = dtypeOf(a.dtype);
    settings.maxSequenceLength = a.maxSequenceLength;
    family = familyOf(a);
    checkFamilyOptions(a, family);
    if (family == ImageFamily::Flux)
      fluxFiles = fluxFilesOf(a);
    else
      flux2Files = flux2FilesOf(a);
  } catch (const Error& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitBadInput;
  }

  diffusion::ImageRequest r;
  r.prompts = a.prompts;
  r.negativePrompt = a.negativePrompt;
  r.lora = a.lora;
  r.loraMultiplier = a.loraMultiplier;
  r.seed = a.seed;
  r.width = a.width;
  r.height = a.height;
  // Ctrl-C: while loading, the process ends at once (nothing to keep); while
  // sampling, after the current step, and nothing is written.
  train::StopOnSignals signals("strata-train sample", "stopping after this step; no image is written");
  r.onStep = [&signals](int64_t done, int64_t total) {
    std::cerr << "step " << done << "/" << total << std::endl;
    if (signals.signalReceived() != 0) throw Interrupted{done};
  };
  diffusion::ImageResult result;
  try {
    std::cerr << "loading " << a.model << std::endl;
    signals.setExitAtOnce(true);
    const auto pipe = family == ImageFamily::Flux ? loadFlux(fluxFiles, settings) : loadFlux2(flux2Files, settings);
    signals.setExitAtOnce(false);
    r.steps = a.steps > 0 ? a.steps : pipe.defaultSteps;
    r.guidance = a.guidanceGiven ? a.guidance : pipe.defaultGuidance;
    result = diffusion::generateImages(*pipe.text, *pipe.codec, pipe.denoiser, r);
  } catch (const Interrupted& i) {
    std::cerr << kWho << "stopped after step " << i.step << " of " << r.steps << "; no image written" << std::endl;
    return 128 + signals.signalReceived();
  } catch (const IoError& e) {  // a missing or unreadable file: the user's input
    std::cerr << kWho << e.what() << std::endl;
    return kExitBadInput;
  } catch (const LoadError& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitBadInput;
  } catch (const ConfigError& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitFailed;
  }

  try {
    for (size_t i = 0; i < a.prompts.size(); ++i) {
      const auto path = outputPath(a.out, i, a.prompts.size());
      io::ImageText text{{"prompt", a.prompts[i]},
                         {"seed", std::to_string(a.seed)},
                         {"steps", std::to_string(r.steps)},
                         {"guidance", std::to_string(r.guidance)},
                         {"Software", std::string("strata ") + kVersion}};
      if (!a.lora.empty()) text["lora"] = fs::path(a.lora).filename().string();
      if (!a.negativePrompt.empty()) text["negative_prompt"] = a.negativePrompt;
      io::writePng(path, result.images[static_cast<int64_t>(i)], text);  // [3, H, W] in [0, 1]
      std::cout << path.string() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

// What one sample may ask for: beyond these the sigma schedule, the latents or
// T5's positions would be allocated from a number the user typed (2^31 steps
// once grew until the OOM killer ended it).
constexpr long long kMaxSampleSteps = 1000;
constexpr long long kMaxTextTokens = 512;

void addSampleCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sample",
      "Generate images with a FLUX.1 or FLUX.2 model and optionally a LoRA file (a Llama-family run's "
      "samples are written by the run)");
  cmd->add_option("model", a->model,
                  "Diffusers FLUX.1 or FLUX.2 folder, a BFL transformer .safetensors, or a run config .yaml")
      ->required();
  cmd->add_option("--prompt", a->prompts, "Prompt (repeatable: one image each)")->required();
  cmd->add_option("--out", a->out, "Output PNG (several prompts: NAME_0.png, NAME_1.png, ...)")
      ->required()
      ->check(nonEmptyCheck("a .png file name"));
  cmd->add_option("--negative-prompt", a->negativePrompt,
                  "What the image should not show: FLUX.2 [klein] base's negative pass (default: empty)");
  cmd->add_option("--lora", a->lora, "LoRA .safetensors (diffusers, kohya or ComfyUI keys)");
  cmd->add_option("--lora-scale", a->loraMultiplier, "Multiplier of the LoRA (default 1)");
  cmd->add_option("--seed", a->seed, "Noise seed (default 0)");
  cmd->add_option("--steps", a->steps,
                  "Sampling steps, 1 to 1000 (default: FLUX.1 28, FLUX.2 50, distilled FLUX.2 [klein] 4)")
      ->check(countCheck("a number of sampling steps", kMaxSampleSteps));
  cmd->add_option("--guidance", a->guidance, "Guidance scale (default: FLUX.1 3.5, FLUX.2 4)");
  cmd->add_option("--width", a->width, "Width in pixels, a multiple of 16 from 16 to 4096 (default 1024)")
      ->check(imageSideCheck());
  cmd->add_option("--height", a->height, "Height in pixels, a multiple of 16 from 16 to 4096 (default 1024)")
      ->check(imageSideCheck());
  cmd->add_option("--max-sequence-length", a->maxSequenceLength,
                  "Text tokens per prompt, 1 to 512 (default 512: T5 for FLUX.1, the templated prompt for FLUX.2)")
      ->check(countCheck("a number of text tokens", kMaxTextTokens));
  cmd->add_option("--vae", a->vae, "VAE file (ae.safetensors, flux2-vae.safetensors), with a single-file transformer");
  cmd->add_option("--clip", a->clip, "FLUX.1: CLIP-L file (clip_l.safetensors), with a single-file transformer");
  cmd->add_option("--t5", a->t5, "FLUX.1: T5-XXL file (t5xxl_fp16.safetensors), with a single-file transformer");
  cmd->add_option("--tokenizer", a->tokenizer, "FLUX.1: folder with tokenizer/ and tokenizer_2/, with single files");
  cmd->add_option("--text-encoder", a->textEncoder,
                  "FLUX.2: the text encoder's folder (Mistral-3 or Qwen3, with its tokenizer), with a single-file "
                  "transformer");
  cmd->add_flag("--distilled", a->distilled,
                "FLUX.2 [klein] single file: the step-distilled model (one pass, no CFG); a folder's "
                "model_index.json says it");
  cmd->add_option("--device", a->device, "cpu or cuda (default cpu)");
  cmd->add_option("--dtype", a->dtype, "Transformer and text encoder dtype: float32 or bfloat16 (default float32)");
  cmd->callback([a, cmd, &exitCode] {
    a->guidanceGiven = cmd->count("--guidance") > 0;
    exitCode = runSample(*a);
  });
}

}  // namespace strata::cli
