#pragma once
// File > New's templates, brought by each model family (ModelFamily::templates).
// A template is a shipped config under configs/ (installed in share/strata/configs,
// built into the app): ready to run as it opens, or for the user's own data and
// model, whose paths the user picks. No path in a template is relative to the
// project folder. Light to include (no ATen): the app lists them.
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace strata::train {

struct ConfigTemplate {
  std::string id;       // "flux-my-images-1gpu"
  std::string file;     // "flux-my-images-1gpu.yaml" under configs/
  std::string title;    // one line
  std::string summary;  // what it is for, in two or three sentences
  // A template of the user's own data: the key the data goes into
  // ("datasets[0].folder_path"), whether it is a folder or a file, and the
  // words that ask for it. Empty dataKey: a template that runs as it is.
  std::string dataKey;
  bool dataIsFolder = true;
  std::string dataQuestion;  // "The folder of your images"
  // The user's own base model, asked for after the data (a folder; empty: not asked).
  std::string modelQuestion;
  std::string modelKey = "model.name_or_path";
  // The words of the button that offers it on the app's first launch ("Try the
  // demo"); empty: not offered there. The app's button is "welcome_<id>".
  std::string firstLaunch = "";
  std::string firstLaunchTip = "";  // the button's tooltip
};

// The templates of `arch`'s registered family, in its order; none for a family
// that is not registered.
std::vector<ConfigTemplate> configTemplates(const std::string& arch);

}  // namespace strata::train
