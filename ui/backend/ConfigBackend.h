#pragma once
// The config document's calls into core/config, in one place: YAML text in and
// out, validation, ai-toolkit import, file I/O. Internal to strata_ui_backend (it
// names core types: the pages use ConfigDocument.h and ConfigViews.h); plain std
// and Qt value types only (no LibTorch).
#include <QStringList>
#include <QVector>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "ui/backend/ViewModel.h"

namespace strata::device {
struct DeviceInfo;
}

namespace strata::ui::backend {

struct ParseResult {
  bool ok = false;  // no errors while reading
  config::RunConfig config;
  bool fromAiToolkit = false;
  QVector<ProblemView> problems;  // reading problems (syntax, types, unknown keys)
};

config::RunConfig defaultConfig();
std::string toYaml(const config::RunConfig& cfg);
ParseResult parseYaml(const std::string& text, const std::string& fileName);
// Reading and rule problems of `cfg`, with lines from `yamlSource` (the text it came from).
// `devices`: the devices to check against (gpu ids, bf16 support); empty = this machine.
QVector<ProblemView> validate(const config::RunConfig& cfg, const std::string& yamlSource,
                              const std::vector<device::DeviceInfo>* devices = nullptr);
// An ai-toolkit job file as a Strata config; `notes` gets every key that was
// dropped or changed, as warnings (their lines are the job file's, so they are
// named in the message, not as a line of the Strata YAML).
config::RunConfig importAiToolkit(const std::string& path, QVector<ProblemView>* notes);
std::string readText(const std::string& path);
void writeText(const std::string& path, const std::string& text);  // atomic

}  // namespace strata::ui::backend
