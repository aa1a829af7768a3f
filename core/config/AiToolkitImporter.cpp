#include "config/AiToolkitImporter.h"

#include "common/Error.h"
#include "common/Text.h"
#include "config/ConfigSchema.h"
#include "config/RunConfigYaml.h"
#include "config/YamlValue.h"
#include "io/FileBytes.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <sstream>

namespace strata::config {
namespace {

// ai-toolkit keys whose Strata key has another name (patterns under process[0]).
const std::map<std::string, std::string>& renames() {
  static const std::map<std::string, std::string> k = {
      {"training_folder", "job.training_folder"},
      {"train.optimizer_params.weight_decay", "train.weight_decay"},
      {"train.optimizer_params.betas", "train.betas"},
      {"train.optimizer_params.eps", "train.eps"},
      {"train.gradient_accumulation", "train.gradient_accumulation_steps"},
      {"datasets[].caption_dropout_rate", "train.caption_dropout_rate"},
  };
  return k;
}

// Why a known ai-toolkit key has no Strata counterpart.
const std::map<std::string, std::string>& reasons() {
  static const std::map<std::string, std::string> k = {
      {"performance_log_every", "Strata logs timings every step"},
      {"save.push_to_hub", "Strata does not upload"},
      {"save.hf_repo_id", "Strata does not upload"},
      {"save.hf_private", "Strata does not upload"},
      {"sample.neg", "FLUX.1-dev samples without a negative prompt"},
      {"sample.sampler", "Strata samples with the flow-matching Euler sampler"},
      {"train.noise_scheduler", "Strata always trains with flow matching"},
      {"train.train_unet", "Strata always trains the transformer"},
      {"train.train_text_encoder", "Strata does not train the text encoders"},
      {"train.skip_first_sample", "Strata samples at step 0 when sample_every > 0"},
      {"train.disable_sampling", "set sample.sample_every: 0 instead"},
      {"train.lr_scheduler_params", "Strata's schedules take only lr_warmup_steps"},
      {"train.linear_timesteps", "use train.timestep_type"},
      {"train.content_or_style", "use train.timestep_type"},
      {"train.noise_offset", "not used for flow matching"},
      {"datasets[].shuffle_tokens", "captions are used as written"},
      {"model.assistant_lora_path", "no assistant LoRA support"},
  };
  return k;
}

class Importer {
 public:
  Importer(LoadedConfig& out, std::vector<UnusedKey>& unused) : out_(out), unused_(unused), reader_(out) {}

  void run(const YAML::Node& root) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key == "job") continue;
      if (key == "config") {
        readConfig(it->second);
      } else {
        drop(key, posOf(it->first), key == "meta" ? "job metadata for ai-toolkit's UI" : "");
      }
    }
  }

 private:
  void drop(const std::string& aiPath, const SourcePos& pos, std::string reason) {
    if (reason.empty()) reason = "no Strata setting for this";
    unused_.push_back({aiPath, pos, reason});
    reader_.problem(Severity::Warning, aiPath, pos, "ai-toolkit key not used by Strata: " + reason);
  }

  void readConfig(const YAML::Node& config) {
    if (!config.IsMap()) {
      reader_.problem(Severity::Error, "config", posOf(config), "expected a mapping with name and process");
      return;
    }
    bool sawProcess = false;
    for (auto it = config.begin(); it != config.end(); ++it) {
      const std::string key = it->first.Scalar();
      const SourcePos pos = posOf(it->first);
      if (key == "name") {
        out_.where.set("job.name", pos);
        reader_.apply(*findKey("job.name"), 0, "job.name", it->second, pos);
      } else if (key == "process") {
        sawProcess = true;
        const YAML::Node list = it->second;
        if (!list.IsSequence() || list.size() == 0 || !list[0].IsMap()) {
          reader_.problem(Severity::Error, "config.process", pos, "expected a list with one trainer process");
          continue;
        }
        for (size_t i = 1; i < list.size(); ++i)
          drop("config.process[" + std::to_string(i) + "]", posOf(list[i]), "Strata runs one process per job");
        readProcess(list[0]);
      } else {
        drop("config." + key, pos, "");
      }
    }
    if (!sawProcess)
      reader_.problem(Severity::Error, "config.process", posOf(config), "the job has no process to import");
  }

  void readProcess(const YAML::Node& process) {
    out_.config.datasets.clear();  // ai-toolkit has no default dataset
    const std::string aiPrefix = "config.process[0].";
    for (auto it = process.begin(); it != process.end(); ++it) {
      const std::string key = it->first.Scalar();
      const YAML::Node value = it->second;
      const SourcePos pos = posOf(it->first);
      if (key == "type") {
        const std::string t = value.IsScalar() ? value.Scalar() : "";
        if (t != "sd_trainer" && t != "ui_trainer")
          drop(aiPrefix + key, pos, "only trainer processes (sd_trainer) are imported");
      } else if (key == "device") {
        readDevice(value, pos);
      } else if (key == "datasets") {
        if (!value.IsSequence()) {
          reader_.problem(Severity::Error, aiPrefix + key, pos, "expected a list of datasets");
          continue;
        }
        out_.where.set("datasets", pos);
        out_.config.datasets.assign(value.size(), DatasetConfig{});
        for (size_t i = 0; i < value.size(); ++i) {
          const std::string concrete = "datasets[" + std::to_string(i) + "]";
          out_.where.set(concrete, posOf(value[i]));
          if (!value[i].IsMap()) {
            reader_.problem(Severity::Error, aiPrefix + concrete, posOf(value[i]), "expected a mapping");
            continue;
          }
          readMap(value[i], "datasets[].", concrete + ".", aiPrefix + concrete + ".", i);
        }
      } else if (value.IsMap() && isSection(key)) {
        readMap(value, key + ".", key + ".", aiPrefix + key + ".", 0);
      } else {
        readKey(key, "", aiPrefix, value, pos, 0);
      }
    }
    readTextEncoderQuantization();
    applyTriggerWord();
  }

  // ai-toolkit's trigger_word is the job's; Strata's is per images dataset (the same
  // use: [trigger] in a caption or a sample prompt is replaced, else put in front).
  // A dataset with its own trigger_word keeps it.
  void applyTriggerWord() {
    if (triggerPos_.line == 0 && triggerPos_.origin.empty()) return;
    bool images = false;
    bool used = false;
    for (size_t i = 0; i < out_.config.datasets.size(); ++i) {
      DatasetConfig& d = out_.config.datasets[i];
      const std::string key = "datasets[" + std::to_string(i) + "].trigger_word";
      if (d.type != DatasetType::Images) continue;
      images = true;
      if (out_.where.has(key)) continue;
      d.triggerWord = trigger_;
      out_.where.set(key, triggerPos_);
      used = true;
    }
    if (!used)
      drop("config.process[0].trigger_word", triggerPos_,
           images ? "every images dataset sets its own trigger_word (Strata's is per dataset)"
                  : "the job has no images dataset to put it in (Strata's trigger word is per images dataset)");
  }

  // ai-toolkit quantizes the text encoder along with the transformer unless quantize_te
  // says otherwise (quantize_te defaults to quantize), and as qtype_te (default qfloat8);
  // Strata has one qtype for both.
  void readTextEncoderQuantization() {
    ModelConfig& m = out_.config.model;
    if (out_.where.has("model.quantize") && !out_.where.has("model.quantize_te")) {
      m.quantizeTe = m.quantize;
      out_.where.set("model.quantize_te", out_.where.find("model.quantize"));
    }
    const std::string aiPath = "config.process[0].model.qtype_te";
    if (!m.quantizeTe) {
      if (!qtypeTe_.empty()) drop(aiPath, qtypeTePos_, "the text encoder is not quantized (quantize_te is false)");
      return;
    }
    const std::string teType = qtypeTe_.empty() ? "qfloat8" : qtypeTe_;
    if (teType == m.qtype) return;
    const bool explicitTe = !qtypeTe_.empty();
    reader_.problem(Severity::Warning, explicitTe ? aiPath : "model.qtype",
                    explicitTe ? qtypeTePos_ : out_.where.find("model.qtype"),
                    "ai-toolkit quantizes the text encoder as " + teType +
                        (explicitTe ? "" : " (its qtype_te default)") + "; Strata quantizes it with model.qtype (" +
                        m.qtype + ")",
                    "set qtype_te to " + m.qtype + ", or quantize_te: false to keep the text encoder in bf16");
  }

  static bool isSection(const std::string& pattern) {
    for (const auto& k : schema())
      if (k.path.rfind(pattern + ".", 0) == 0) return true;
    for (const auto& r : renames())
      if (r.first.rfind(pattern + ".", 0) == 0) return true;
    return false;
  }

  void readDevice(const YAML::Node& value, const SourcePos& pos) {
    const std::string d = value.IsScalar() ? value.Scalar() : "";
    out_.where.set("model.device", pos);
    if (d == "cpu") {
      out_.config.model.device = ComputeDevice::Cpu;
    } else if (d.rfind("cuda", 0) == 0) {
      out_.config.model.device = ComputeDevice::Cuda;
      // "cuda:2" picks one GPU; model.gpu_ids (read later) wins for a split.
      if (d.size() > 5 && d[4] == ':' && out_.config.model.gpuIds.empty()) {
        try {
          out_.config.model.gpuIds = {std::stoi(d.substr(5))};
          out_.where.set("model.gpu_ids", pos);
        } catch (const std::exception&) {
          reader_.problem(Severity::Error, "config.process[0].device", pos, "cannot read the device '" + d + "'",
                          "cpu, cuda or cuda:N");
        }
      }
    } else {
      reader_.problem(Severity::Error, "config.process[0].device", pos, "cannot read the device '" + d + "'",
                      "cpu, cuda or cuda:N");
    }
  }

  // Keys of one mapping; `pattern` prefixes are ai-toolkit patterns ("train.",
  // "datasets[]."), `strataPrefix` the concrete Strata prefix for positions.
  void readMap(const YAML::Node& map, const std::string& patternPrefix, const std::string& strataPrefix,
               const std::string& aiPrefix, size_t datasetIndex) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.Scalar();
      readKey(patternPrefix + key, strataPrefix + key, aiPrefix + key, it->second, posOf(it->first), datasetIndex);
    }
  }

  void readKey(const std::string& pattern, std::string strataConcrete, const std::string& aiPrefixOrPath,
               const YAML::Node& value, const SourcePos& pos, size_t datasetIndex) {
    // At the process level readKey gets (key, "", "config.process[0].").
    std::string aiPath = aiPrefixOrPath;
    if (strataConcrete.empty()) aiPath += pattern;
    const std::string scalar = value.IsScalar() ? value.Scalar() : "";

    // Values that match what Strata always does are used, not reported.
    if ((pattern == "train.noise_scheduler" && scalar == "flowmatch") ||
        (pattern == "sample.sampler" && scalar == "flowmatch") ||
        (pattern == "train.train_unet" && (scalar == "true" || scalar == "True")) ||
        (pattern == "train.train_text_encoder" && (scalar == "false" || scalar == "False")))
      return;
    if (pattern == "train.optimizer") {
      out_.where.set("train.optimizer", pos);
      const std::string lower = toLowerAscii(scalar);
      if (lower == "adamw8bit" || lower == "adamw_8bit") {
        out_.config.train.optimizer = OptimizerType::AdamW8bit;
        return;
      }
      if (lower != "adamw")
        reader_.problem(Severity::Warning, "train.optimizer", pos,
                        "ai-toolkit optimizer '" + scalar + "' is not available in Strata; imported as adamw",
                        "Strata has adamw and adamw8bit");
      out_.config.train.optimizer = OptimizerType::AdamW;
      return;
    }
    if (pattern == "trigger_word") {  // put into the datasets once they are read
      if (!value.IsScalar()) {
        reader_.problem(Severity::Error, aiPath, pos, "expected a word, got " + describeNode(value));
        return;
      }
      trigger_ = scalar;
      triggerPos_ = pos;
      return;
    }
    if (pattern == "model.low_vram") {
      // ai-toolkit's low_vram keeps the model on the CPU while it quantizes it; Strata
      // loads and quantizes block by block on the training device, so there is
      // nothing to switch. Taken over, it would only be refused by the validator.
      if (scalar == "true" || scalar == "True")
        drop(aiPath, pos,
             "Strata loads and quantizes the model one block at a time on the training device, which is what "
             "low_vram does in ai-toolkit, so it needs no switch (model.low_vram stays false). To use less GPU "
             "memory: model.quantize, train.gradient_checkpointing, model.split_model_over_gpus or "
             "train.offload_optimizer_state");
      return;
    }
    if (pattern == "model.qtype_te") {  // compared with model.qtype once the process is read
      qtypeTe_ = scalar;
      qtypeTePos_ = pos;
      return;
    }
    if (pattern == "model.arch") {
      out_.where.set("model.is_flux", pos);
      out_.config.model.isFlux = scalar.rfind("flux", 0) == 0;
      return;
    }

    std::string target;
    if (auto r = renames().find(pattern); r != renames().end()) {
      target = r->second;
      if (pattern == "datasets[].caption_dropout_rate" && datasetIndex > 0) {
        drop(aiPath, pos, "Strata has one caption_dropout_rate (train.caption_dropout_rate), taken from datasets[0]");
        return;
      }
    } else if (findKey(pattern)) {
      target = pattern;
    }
    if (!target.empty()) {
      const KeySpec* spec = findKey(target);
      std::string concrete = target;
      if (spec->isDatasetKey()) concrete = "datasets[" + std::to_string(datasetIndex) + "]" + target.substr(10);
      out_.where.set(concrete, pos);
      reader_.apply(*spec, datasetIndex, concrete, value, pos);
      return;
    }
    if (value.IsMap() && isSection(pattern)) {
      for (auto it = value.begin(); it != value.end(); ++it) {
        const std::string key = it->first.Scalar();
        readKey(pattern + "." + key, (strataConcrete.empty() ? pattern : strataConcrete) + "." + key,
                aiPath + "." + key, it->second, posOf(it->first), datasetIndex);
      }
      return;
    }
    auto why = reasons().find(pattern);
    drop(aiPath, pos, why == reasons().end() ? "" : why->second);
  }

  LoadedConfig& out_;
  std::vector<UnusedKey>& unused_;
  YamlReader reader_;
  std::string trigger_;  // the job's trigger_word, for its images datasets
  SourcePos triggerPos_;
  std::string qtypeTe_;  // model.qtype_te as written, empty when absent
  SourcePos qtypeTePos_;
};

}  // namespace

bool isAiToolkitJob(const YAML::Node& root) {
  return root.IsMap() && root["job"] && root["job"].IsScalar() && root["config"] && root["config"].IsMap();
}

void importAiToolkitRoot(const YAML::Node& root, LoadedConfig& out, std::vector<UnusedKey>& unused) {
  out.fromAiToolkit = true;
  Importer(out, unused).run(root);
}

ImportResult importAiToolkit(const std::string& yamlText, const std::string& fileName) {
  ImportResult result;
  result.loaded.where.file = fileName;
  YamlReader reader(result.loaded);
  YAML::Node root;
  try {
    root = YAML::Load(yamlText);
  } catch (const YAML::ParserException& e) {
    reader.problem(Severity::Error, "", SourcePos{e.mark.line + 1, e.mark.column + 1, ""},
                   "YAML syntax error: " + e.msg);
    return result;
  }
  if (!isAiToolkitJob(root)) {
    reader.problem(Severity::Error, "", {}, "not an ai-toolkit job file (expected `job: extension` and `config:`)");
    return result;
  }
  try {
    importAiToolkitRoot(root, result.loaded, result.unused);
  } catch (const YAML::Exception& e) {
    reader.problem(Severity::Error, "", SourcePos{e.mark.line + 1, e.mark.column + 1, ""},
                   std::string("YAML error: ") + e.msg);
  }
  return result;
}

ImportResult importAiToolkitFile(const std::filesystem::path& path) {
  // A job file is a few KB, as a run config: the same cap before yaml-cpp builds its tree.
  return importAiToolkit(io::readSmallFile(path, kMaxConfigBytes, "ai-toolkit job file"), path.string());
}

}  // namespace strata::config
