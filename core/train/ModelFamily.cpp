#include "train/ModelFamily.h"

#include <mutex>

#include "common/Error.h"
#include "config/FamilyRegistry.h"
#include "train/ImageFolder.h"

namespace strata::train {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const ModelFamily>> families;
};

Registry& registry() {
  static Registry r;  // first use: safe from the registration's static initialiser
  return r;
}

}  // namespace

std::filesystem::path ModelFamily::exportPathIn(const std::filesystem::path& dir, const config::RunConfig& cfg,
                                                config::ExportFormat format, std::optional<int64_t> step) const {
  return dir / (cfg.job.name + (step ? "_step" + std::to_string(*step) : "") + "_" + config::enumName(format) +
                ".safetensors");
}

std::vector<ConfigTemplate> configTemplates(const std::string& arch) {
  return hasModelFamily(arch) ? modelFamily(arch).templates() : std::vector<ConfigTemplate>{};
}

std::string ModelFamily::displayName() const {
  const config::FamilyDescription* d = config::findFamily(arch());
  return d ? d->displayName : arch();
}

std::string ModelFamily::planKey(const config::RunConfig&) const { return "model.name_or_path"; }

std::vector<placement::OtherModule> ModelFamily::otherModules(const config::RunConfig&, const std::string&,
                                                              std::string* note) const {
  if (note) note->clear();
  return {};
}

std::vector<config::Problem> ModelFamily::dataProblems(const config::RunConfig& cfg,
                                                       const config::SourceMap* where) const {
  std::vector<config::Problem> out;
  for (size_t i = 0; i < cfg.datasets.size(); ++i) {
    const config::DatasetConfig& d = cfg.datasets[i];
    std::error_code ec;
    if (d.type != config::DatasetType::Images || d.folderPath.empty() ||
        !std::filesystem::is_directory(d.folderPath, ec))
      continue;  // a missing folder is the validator's
    const std::string key = "datasets[" + std::to_string(i) + "].folder_path";
    ImageFolderScan scan;
    try {
      scan = scanImageFolder(d, 1);  // one usable image answers the question
    } catch (const std::exception& e) {
      out.push_back(config::problemAt(config::Severity::Error, key, e.what(), "", where));
      continue;
    }
    if (scan.images > 0) continue;
    std::string why;
    for (size_t k = 0; k < scan.skipped.size() && k < 3; ++k)
      why += (k ? "; " : ": ") + scan.skipped[k].path.filename().string() + ": " + scan.skipped[k].reason;
    if (scan.skipped.size() > 3) why += "; and " + std::to_string(scan.skipped.size() - 3) + " more";
    out.push_back(config::problemAt(
        config::Severity::Error, key,
        scan.skipped.empty() ? "no image in " + d.folderPath + ": the dataset yields nothing to train on"
                             : "no usable image in " + d.folderPath + " (" + std::to_string(scan.skipped.size()) +
                                   " skipped" + why + ")",
        scan.skipped.empty() ? "put the images there (.png, .jpg, .jpeg, .webp), each with an optional caption "
                               "file of the same name (." +
                                   d.captionExt + ")"
                             : "the Dataset tab lists every file with the reason",
        where));
  }
  return out;
}

std::vector<config::Problem> dataProblems(const config::RunConfig& cfg, const config::SourceMap* where) {
  if (!hasModelFamily(cfg.model.arch)) return {};
  return modelFamily(cfg.model.arch).dataProblems(cfg, where);
}

void registerModelFamily(std::shared_ptr<const ModelFamily> family) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto arch = family->arch();
  r.families[arch] = std::move(family);
}

bool hasModelFamily(const std::string& arch) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.families.count(arch) > 0;
}

std::vector<const ModelFamily*> registeredModelFamilies() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const ModelFamily*> out;
  for (const auto& [arch, family] : r.families) out.push_back(family.get());
  return out;
}

const ModelFamily& modelFamily(const std::string& arch) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.families.find(arch);
  if (it == r.families.end())
    throw ConfigError(
        "model.arch: '" + arch + "' has no model family in this program" +
        (r.families.empty() ? " (it registers none: its main() must call strata::families::registerAll())" : ""));
  return *it->second;
}

config::RunConfig tinyRunSettings(const std::string& arch, const std::filesystem::path& folder) {
  config::RunConfig c;
  c.job.name = arch + "-tiny";
  c.job.trainingFolder = folder.string();
  c.model.arch = arch;
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cpu;
  c.network.linear = 4;
  c.network.linearAlpha = 8;
  c.train.steps = 6;
  c.train.lr = 2e-3;
  c.train.dtype = config::DType::FP32;
  c.train.seed = 5;
  c.sample.sampleEvery = 0;
  c.sample.prompts = {};
  c.save.saveEvery = 3;
  c.save.maxStepSavesToKeep = 10;
  c.save.dtype = config::DType::FP32;
  return c;
}

}  // namespace strata::train
