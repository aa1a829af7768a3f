#include "train/ModelFamily.h"

#include <mutex>

#include "common/Error.h"

namespace strata::train {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<config::ModelArch, std::shared_ptr<const ModelFamily>> families;
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

std::vector<ConfigTemplate> configTemplates(config::ModelArch arch) {
  return hasModelFamily(arch) ? modelFamily(arch).templates() : std::vector<ConfigTemplate>{};
}

std::string ModelFamily::planKey(const config::RunConfig&) const { return "model.name_or_path"; }

std::vector<placement::OtherModule> ModelFamily::otherModules(const config::RunConfig&, const std::string&,
                                                              std::string* note) const {
  if (note) note->clear();
  return {};
}

void registerModelFamily(std::shared_ptr<const ModelFamily> family) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto arch = family->arch();
  r.families[arch] = std::move(family);
}

bool hasModelFamily(config::ModelArch arch) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.families.count(arch) > 0;
}

const ModelFamily& modelFamily(config::ModelArch arch) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.families.find(arch);
  if (it == r.families.end())
    throw ConfigError("model.arch: '" + config::enumName(arch) + "' has no model family in this program" +
                      (r.families.empty() ? " (it registers none: its main() must call strata::families::registerAll())"
                                          : ""));
  return *it->second;
}

}  // namespace strata::train
