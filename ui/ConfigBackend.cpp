#include "ui/ConfigBackend.h"

#include <QObject>
#include <sstream>

#include "common/Error.h"
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
