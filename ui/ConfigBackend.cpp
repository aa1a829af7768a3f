#include "ui/ConfigBackend.h"

#include <fstream>
#include <sstream>

#include "common/Error.h"
#include "config/Problem.h"
#include "config/RunConfigYaml.h"
#include "io/AtomicFile.h"

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
  QVector<ProblemView> out;
  config::LoadedConfig loaded = config::parseRunConfig(yamlSource, "<editor>");
  // Reading problems (unknown keys, ...) of the text still apply when the text is the config's.
  if (loaded.config == cfg)
    for (const config::Problem& p : loaded.problems) out << toView(p);
  return out;
}

config::RunConfig importAiToolkit(const std::string& path, QStringList* notes) {
  config::LoadedConfig loaded = config::loadRunConfig(path);
  if (!loaded.ok()) {
    std::string message = "cannot import " + path + ":";
    for (const config::Problem& p : loaded.problems)
      if (p.isError()) message += "\n" + p.format();
    throw ConfigError(message);
  }
  if (notes)
    for (const config::Problem& p : loaded.problems) *notes << QString::fromStdString(p.format());
  return loaded.config;
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeText(const std::string& path, const std::string& text) { io::writeFileAtomic(path, text); }

}  // namespace strata::ui::backend
