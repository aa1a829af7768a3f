#include "train/TextRecords.h"

#include <map>
#include <mutex>

#include "common/Error.h"

namespace strata::train {

namespace {

struct Readers {
  std::mutex mutex;
  std::map<config::DatasetType, TextRecordReader> byType;
};

Readers& readers() {
  static Readers r;
  return r;
}

}  // namespace

void registerTextRecordReader(config::DatasetType type, TextRecordReader reader) {
  Readers& r = readers();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.byType[type] = std::move(reader);
}

int64_t readTextRecords(const config::DatasetConfig& dataset, const std::string& text, const TextRecordSink& onRecord) {
  TextRecordReader reader;
  {
    Readers& r = readers();
    const std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.byType.find(dataset.type);
    if (it == r.byType.end())
      throw ConfigError("datasets[].type: " + config::enumName(dataset.type) +
                        ": no model family of this program reads it line by line");
    reader = it->second;
  }
  return reader(dataset, text, onRecord);
}

}  // namespace strata::train
