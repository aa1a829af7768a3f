// LibTorch first (the family registry): Qt's `slots` macro breaks its headers.
#include "train/ModelFamily.h"

#include "ui/backend/ConfigBackend.h"

#include <QObject>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "config/Problem.h"
#include "config/AiToolkitImporter.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "device/DeviceInventory.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"

namespace strata::ui::backend {

namespace {

ProblemView toView(const config::Problem& p) {
  ProblemView v;
  v.error = p.isError();
  v.key = QString::fromStdString(p.key);
  v.line = p.line;
  v.column = p.column;
  v.message = QString::fromStdString(p.message);
  v.hint = QString::fromStdString(p.hint);
  return v;
}

// "<mtime>:<size>" of a file or folder ("" when missing): a dataset read again when it changes.
std::string stampOf(const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  const auto t = std::filesystem::last_write_time(path, ec);
  if (ec) return "-";
  const auto size = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  return std::to_string(t.time_since_epoch().count()) + ":" + std::to_string(size);
}

// The family's dataProblems, read again only when what they depend on changes (the
// dataset keys, the model and tokenizer paths, the files' times): the check reads
// image headers and jsonl lines, and the editor validates on every edit.
std::vector<config::Problem> cachedDataProblems(const config::RunConfig& cfg) {
  std::string key = cfg.model.arch + "\n" + cfg.model.nameOrPath + "\n" + cfg.model.tokenizerPath + "\n" +
                    stampOf(cfg.model.tokenizerPath.empty() ? cfg.model.nameOrPath : cfg.model.tokenizerPath) + "\n" +
                    (cfg.sample.sampleEvery > 0 && !cfg.sample.prompts.empty() ? "samples" : "") + "\n";
  // Only what decides whether a dataset yields a sample: typing a trigger word or a caption
  // does not read an image folder again.
  for (size_t i = 0; i < cfg.datasets.size(); ++i) {
    for (const char* k : {"type", "folder_path", "resolution", "file_path", "prompt_field", "response_field",
                          "text_field", "response_marker"})
      key += config::getValueText(cfg, "datasets[" + std::to_string(i) + "]." + k) + "\t";
    key += stampOf(cfg.datasets[i].folderPath) + "\t" + stampOf(cfg.datasets[i].filePath) + "\n";
  }
  static std::map<std::string, std::vector<config::Problem>> cache;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::vector<config::Problem> problems;
  try {
    problems = train::dataProblems(cfg);
  } catch (const std::exception& e) {
    problems.push_back(config::problemAt(config::Severity::Error, "datasets", e.what()));
  }
  if (cache.size() > 64) cache.clear();
  cache[key] = problems;
  return problems;
}

}  // namespace

config::RunConfig defaultConfig() { return config::RunConfig{}; }

std::string toYaml(const config::RunConfig& cfg) { return config::toYaml(cfg); }

ParseResult parseYaml(const std::string& text, const std::string& fileName) {
  ParseResult out;
  config::LoadedConfig loaded = config::parseRunConfig(text, fileName.empty() ? "<editor>" : fileName);
  out.ok = loaded.ok();
  out.config = std::move(loaded.config);
  out.fromAiToolkit = loaded.fromAiToolkit;
  for (const config::Problem& p : loaded.problems) out.problems << toView(p);
  return out;
}

QVector<ProblemView> validate(const config::RunConfig& cfg, const std::string& yamlSource,
                              const std::vector<device::DeviceInfo>* devices) {
  // The devices that will train: this machine's CUDA devices (asked once), unless given.
  static const std::vector<device::DeviceInfo> kLocal = [] {
    try {
      return device::listDevices();
    } catch (const std::exception&) {
      return std::vector<device::DeviceInfo>{};
    }
  }();
  const std::vector<device::DeviceInfo>& devs = devices ? *devices : kLocal;
  QVector<ProblemView> out;
  config::LoadedConfig loaded = config::parseRunConfig(yamlSource, "<editor>");
  std::vector<config::Problem> problems;
  if (loaded.config == cfg) {
    // The text is this config: reading problems count too, and lines are known.
    problems = config::validateLoaded(loaded, devs);
  } else {
    config::ValidateOptions options;
    options.devices = devs;
    problems = config::validate(cfg, options);
  }
  // What the datasets give, placed at the lines of this text when it is the config.
  if (loaded.readable) {
    const config::SourceMap* where = loaded.config == cfg ? &loaded.where : nullptr;
    for (const config::Problem& p : cachedDataProblems(cfg))
      problems.push_back(config::problemAt(p.severity, p.key, p.message, p.hint, where));
  }
  for (const config::Problem& p : problems) out << toView(p);
  return out;
}

config::RunConfig importAiToolkit(const std::string& path, QVector<ProblemView>* notes) {
  config::ImportResult imported = config::importAiToolkitFile(path);
  config::LoadedConfig& loaded = imported.loaded;
  if (!loaded.ok()) {
    std::string message = "cannot import " + path + ":";
    for (const config::Problem& p : loaded.problems)
      if (p.isError()) message += "\n" + p.format();
    throw ConfigError(message);
  }
  if (notes)
    for (const config::Problem& p : loaded.problems) {
      ProblemView v = toView(p);
      v.error = false;
      v.line = v.column = 0;
      v.message = QObject::tr("import: %1").arg(v.message);
      if (p.line > 0)
        v.hint = QObject::tr("%1 line %2%3")
                     .arg(QString::fromStdString(path))
                     .arg(p.line)
                     .arg(v.hint.isEmpty() ? QString() : "; " + v.hint);
      *notes << v;
    }
  return loaded.config;
}

std::string readText(const std::string& path) { return io::readFileBytes(path); }

void writeText(const std::string& path, const std::string& text) { io::writeFileAtomic(path, text); }

}  // namespace strata::ui::backend
