// `strata-train sample MODEL|CONFIG --prompt TEXT [--prompt ...] --out PNG [...]`:
// FLUX.1 text-to-image through the generic image path (diffusion::generateImages
// with the pieces of families/flux's FluxPipeline), optionally with a LoRA file. MODEL
// is a diffusers folder or a BFL transformer file (then --vae, --clip, --t5 and
// --tokenizer name the rest); a .yaml/.yml run config gives model.* instead.
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
#include "train/StopSignals.h"

namespace fs = std::filesystem;

namespace strata::cli {

namespace {

struct SampleArgs {
  std::string model;
  std::string vae, clip, t5, tokenizer;
  std::vector<std::string> prompts;
  std::string lora;
  double loraMultiplier = 1.0;
  uint64_t seed = 0;
  int64_t steps = 28;
  double guidance = 3.5;
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

families::PipelineFiles filesOf(const SampleArgs& a) {
  const fs::path model = a.model;
  const auto ext = model.extension().string();
  if (ext == ".yaml" || ext == ".yml") {
    config::LoadedConfig loaded = config::loadRunConfig(model);
    for (const auto& p : loaded.problems)
      if (p.isError()) throw ConfigError(p.format());
    const auto& m = loaded.config.model;
    if (m.arch != "flux")
      throw ConfigError(model.string() + ": model.arch is " + m.arch +
                        "; strata-train sample is FLUX.1 text-to-image (a causal LM's samples are written by its run)");
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

at::ScalarType dtypeOf(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw ConfigError("--dtype: '" + name + "' is not float32 or bfloat16");
}

int runSample(const SampleArgs& a) {
  const char* kWho = "strata-train sample: ";
  families::PipelineFiles files;
  families::PipelineOptions options;
  try {
    checkOutput(a.out);
    if (!std::isfinite(a.guidance) || a.guidance < 0 || a.guidance > 100)
      throw ConfigError("--guidance: give a number from 0 to 100 (FLUX.1-dev: about 3.5)");
    if (!std::isfinite(a.loraMultiplier) || std::fabs(a.loraMultiplier) > 100)
      throw ConfigError("--lora-scale: give a number from -100 to 100 (1 = as trained)");
    if (!a.lora.empty() && !fs::is_regular_file(a.lora)) throw ConfigError("--lora: '" + a.lora + "' is not a file");
    if (a.device == "cuda") {
      options.device = at::Device(at::kCUDA);
    } else if (a.device != "cpu") {
      throw ConfigError("--device: '" + a.device + "' is not cpu or cuda");
    }
    options.transformerDtype = dtypeOf(a.dtype);
    options.text.t5Dtype = options.transformerDtype;
    options.text.maxSequenceLength = a.maxSequenceLength;
    files = filesOf(a);
  } catch (const Error& e) {
    std::cerr << kWho << e.what() << std::endl;
    return kExitBadInput;
  }

  diffusion::ImageRequest r;
  r.prompts = a.prompts;
  r.lora = a.lora;
  r.loraMultiplier = a.loraMultiplier;
  r.seed = a.seed;
  r.steps = a.steps;
  r.guidance = a.guidance;
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
    auto pipe = families::FluxPipeline::load(files, options);
    signals.setExitAtOnce(false);
    result = diffusion::generateImages(pipe->textEncoder(), pipe->codec(), pipe->denoiser(), r);
  } catch (const Interrupted& i) {
    std::cerr << kWho << "stopped after step " << i.step << " of " << a.steps << "; no image written" << std::endl;
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
                         {"steps", std::to_string(a.steps)},
                         {"guidance", std::to_string(a.guidance)},
                         {"Software", std::string("strata ") + kVersion}};
      if (!a.lora.empty()) text["lora"] = fs::path(a.lora).filename().string();
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
constexpr long long kMaxT5Tokens = 512;

void addSampleCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample",
                                     "Generate images with a FLUX.1 model and optionally a LoRA file (FLUX.2 and "
                                     "Llama-family runs cannot be sampled here)");
  cmd->add_option("model", a->model, "Diffusers FLUX.1 folder, BFL transformer .safetensors, or a run config .yaml")
      ->required();
  cmd->add_option("--prompt", a->prompts, "Prompt (repeatable: one image each)")->required();
  cmd->add_option("--out", a->out, "Output PNG (several prompts: NAME_0.png, NAME_1.png, ...)")
      ->required()
      ->check(nonEmptyCheck("a .png file name"));
  cmd->add_option("--lora", a->lora, "LoRA .safetensors (diffusers, kohya or ComfyUI keys)");
  cmd->add_option("--lora-scale", a->loraMultiplier, "Multiplier of the LoRA (default 1)");
  cmd->add_option("--seed", a->seed, "Noise seed (default 0)");
  cmd->add_option("--steps", a->steps, "Sampling steps, 1 to 1000 (default 28)")
      ->check(countCheck("a number of sampling steps", kMaxSampleSteps));
  cmd->add_option("--guidance", a->guidance, "Guidance scale (default 3.5)");
  cmd->add_option("--width", a->width, "Width in pixels, a multiple of 16 from 16 to 4096 (default 1024)")
      ->check(imageSideCheck());
  cmd->add_option("--height", a->height, "Height in pixels, a multiple of 16 from 16 to 4096 (default 1024)")
      ->check(imageSideCheck());
  cmd->add_option("--max-sequence-length", a->maxSequenceLength, "T5 tokens, 1 to 512 (default 512, FLUX.1-dev)")
      ->check(countCheck("a number of T5 tokens", kMaxT5Tokens));
  cmd->add_option("--vae", a->vae, "VAE file (ae.safetensors), with a single-file transformer");
  cmd->add_option("--clip", a->clip, "CLIP-L file (clip_l.safetensors), with a single-file transformer");
  cmd->add_option("--t5", a->t5, "T5-XXL file (t5xxl_fp16.safetensors), with a single-file transformer");
  cmd->add_option("--tokenizer", a->tokenizer, "Folder with tokenizer/ and tokenizer_2/, with single files");
  cmd->add_option("--device", a->device, "cpu or cuda (default cpu)");
  cmd->add_option("--dtype", a->dtype, "Transformer and T5 dtype: float32 or bfloat16 (default float32)");
  cmd->callback([a, &exitCode] { exitCode = runSample(*a); });
}

}  // namespace strata::cli
