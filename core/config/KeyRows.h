#pragma once
// How a key row is written: the shared table (ConfigSchema.cpp) and each family's
// description (core/families/<id>/) build their KeySpecs with keyRow(), so a key is
// one row wherever it lives: path, the struct member it reads, doc, options and
// looks. Template code, kept out of ConfigSchema.h so that only row writers pay for it.
#include "common/Error.h"
#include "config/ConfigSchema.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata::config {

// The registered families' ids, in registration order (config/FamilyRegistry.h).
std::vector<std::string> familyIds();

namespace rows {

// ---- conversion between a member type and Value -----------------------------

template <class T, class = void>
struct Conv;

[[noreturn]] inline void wrongType(const char* expected) { throw ConfigError(std::string("expected ") + expected); }

template <>
struct Conv<bool> {
  static constexpr KeyType kType = KeyType::Bool;
  static Value to(bool v) { return v; }
  static bool from(const Value& v) {
    if (auto* b = std::get_if<bool>(&v)) return *b;
    wrongType("a bool");
  }
};

template <>
struct Conv<int64_t> {
  static constexpr KeyType kType = KeyType::Int;
  static Value to(int64_t v) { return v; }
  static int64_t from(const Value& v) {
    if (auto* i = std::get_if<int64_t>(&v)) return *i;
    wrongType("an integer");
  }
};

template <>
struct Conv<double> {
  static constexpr KeyType kType = KeyType::Float;
  static Value to(double v) { return v; }
  static double from(const Value& v) {
    if (auto* d = std::get_if<double>(&v)) return *d;
    if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    wrongType("a number");
  }
};

template <>
struct Conv<std::string> {
  static constexpr KeyType kType = KeyType::String;
  static Value to(const std::string& v) { return v; }
  static std::string from(const Value& v) {
    if (auto* s = std::get_if<std::string>(&v)) return *s;
    wrongType("a string");
  }
};

template <class E>
struct Conv<E, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr KeyType kType = KeyType::Choice;
  static Value to(E v) { return enumName(v); }
  static E from(const Value& v) {
    auto* s = std::get_if<std::string>(&v);
    if (!s) wrongType("a string");
    if (auto e = parseEnum<E>(*s)) return *e;
    std::string msg = "expected one of:";
    for (const auto& c : enumChoices<E>()) msg += " " + (c.empty() ? std::string("\"\"") : c);
    throw ConfigError(msg);
  }
};

template <class T>
struct Conv<std::optional<T>> {
  static constexpr KeyType kType = Conv<T>::kType;
  static Value to(const std::optional<T>& v) { return v ? Conv<T>::to(*v) : Value{}; }
  static std::optional<T> from(const Value& v) {
    if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
    return Conv<T>::from(v);
  }
};

template <class I>
struct IntListConv {
  static constexpr KeyType kType = KeyType::IntList;
  static Value to(const std::vector<I>& v) { return std::vector<int64_t>(v.begin(), v.end()); }
  static std::vector<I> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) {
      std::vector<I> out;
      for (int64_t x : *l) {
        if (x < std::numeric_limits<I>::min() || x > std::numeric_limits<I>::max()) wrongType("smaller integers");
        out.push_back(static_cast<I>(x));
      }
      return out;
    }
    wrongType("a list of integers");
  }
};
template <>
struct Conv<std::vector<int64_t>> : IntListConv<int64_t> {};
template <>
struct Conv<std::vector<int>> : IntListConv<int> {};

template <>
struct Conv<std::vector<double>> {
  static constexpr KeyType kType = KeyType::FloatList;
  static Value to(const std::vector<double>& v) { return v; }
  static std::vector<double> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<double>>(&v)) return *l;
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(l->begin(), l->end());
    wrongType("a list of numbers");
  }
};

template <>
struct Conv<std::vector<std::string>> {
  static constexpr KeyType kType = KeyType::StringList;
  static Value to(const std::vector<std::string>& v) { return v; }
  static std::vector<std::string> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<std::string>>(&v)) return *l;
    wrongType("a list of strings");
  }
};

template <class E>
struct Conv<std::vector<E>, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr KeyType kType = KeyType::ChoiceList;
  static Value to(const std::vector<E>& v) {
    std::vector<std::string> out;
    for (E e : v) out.push_back(enumName(e));
    return out;
  }
  static std::vector<E> from(const Value& v) {
    auto* l = std::get_if<std::vector<std::string>>(&v);
    if (!l) wrongType("a list of strings");
    std::vector<E> out;
    for (const auto& s : *l) out.push_back(Conv<E>::from(Value{s}));
    return out;
  }
};

template <class E>
std::vector<std::string> choicesFor() {
  if constexpr (std::is_enum_v<E>) {
    return enumChoices<E>();
  } else {
    return {};
  }
}
template <class T>
struct ElementOf {
  using type = T;
};
template <class T>
struct ElementOf<std::vector<T>> {
  using type = T;
};

// ---- building the table -----------------------------------------------------

// Options of one entry beyond path/accessor/doc.
struct Opt {
  std::string unit_;
  std::optional<double> min_;
  std::optional<double> max_;
  bool minExclusive_ = false;
  PathKind pathKind_ = PathKind::None;  // a String that names a file or folder
  bool scalarAsList_ = false;
  bool commaString_ = false;
  std::optional<size_t> listSize_;
  std::function<std::string(const Value&)> check_;
  // How a form shows the key (KeySpec::label, group, basic) and the dataset types that read it.
  std::string label_;
  std::string group_;
  bool basic_ = false;
  std::vector<DatasetType> datasetTypes_;
  bool quietElsewhere_ = false;
  bool familyId_ = false;
  bool presetName_ = false;

  Opt& look(std::string label, std::string group, bool basic = false) {
    label_ = std::move(label);
    group_ = std::move(group);
    basic_ = basic;
    return *this;
  }
  Opt& datasetTypes(std::vector<DatasetType> types) {
    datasetTypes_ = std::move(types);
    return *this;
  }
  // KeySpec::quietElsewhere.
  Opt& quietElsewhere() {
    quietElsewhere_ = true;
    return *this;
  }
  // A string key whose value is a registered family's id (model.arch): a Choice of familyIds().
  Opt& familyId() {
    familyId_ = true;
    return *this;
  }

  // A string key naming a registered family's preset (model.preset): a Choice of
  // "" and presetNames(); "auto" reads as "".
  Opt& presetName() {
    presetName_ = true;
    return *this;
  }

  Opt& unit(std::string u) {
    unit_ = std::move(u);
    return *this;
  }
  Opt& check(std::function<std::string(const Value&)> f) {
    check_ = std::move(f);
    return *this;
  }
  Opt& min(double v) {
    min_ = v;
    return *this;
  }
  Opt& max(double v) {
    max_ = v;
    return *this;
  }
  Opt& minExclusive(bool v) {
    minExclusive_ = v;
    return *this;
  }
  Opt& file() {
    pathKind_ = PathKind::File;
    return *this;
  }
  Opt& folder() {
    pathKind_ = PathKind::Folder;
    return *this;
  }
  Opt& fileOrFolder() {
    pathKind_ = PathKind::FileOrFolder;
    return *this;
  }
  Opt& saveFile() {
    pathKind_ = PathKind::SaveFile;
    return *this;
  }
  Opt& scalarAsList(bool v) {
    scalarAsList_ = v;
    return *this;
  }
  Opt& commaString(bool v) {
    commaString_ = v;
    return *this;
  }
  Opt& listSize(size_t v) {
    listSize_ = v;
    return *this;
  }
};

template <class T>
using Accessor = T& (*)(RunConfig&, size_t);

template <class T>
constexpr bool isOptional() {
  if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<bool>>) {
    return true;
  } else {
    return false;
  }
}

// The fields every row fills from its options; get and set are the caller's.
template <class T>
KeySpec rowOf(std::string path, std::string doc, Opt opt, std::function<Value(const RunConfig&, size_t)> get,
              std::function<void(RunConfig&, size_t, const Value&)> set) {
  KeySpec k;
  k.path = std::move(path);
  k.type = Conv<T>::kType;
  if (opt.pathKind_ != PathKind::None && k.type == KeyType::String) {
    k.type = KeyType::Path;
    k.pathKind = opt.pathKind_;
  }
  k.unit = std::move(opt.unit_);
  k.doc = std::move(doc);
  k.min = opt.min_;
  k.max = opt.max_;
  k.minExclusive = opt.minExclusive_;
  k.choices = choicesFor<typename ElementOf<T>::type>();
  k.nullable = isOptional<T>();
  k.scalarAsList = opt.scalarAsList_;
  k.commaString = opt.commaString_;
  k.listSize = opt.listSize_;
  k.check = std::move(opt.check_);
  k.label = std::move(opt.label_);
  k.group = std::move(opt.group_);
  k.basic = opt.basic_;
  k.modelShape = k.group == "Model shape";
  k.datasetTypes = std::move(opt.datasetTypes_);
  k.quietElsewhere = opt.quietElsewhere_;
  k.get = std::move(get);
  k.set = std::move(set);
  if constexpr (std::is_same_v<T, std::string>) {
    if (opt.presetName_) {
      // The presets of the families registered when the schema is built; which
      // family's a preset must be is the validator's (model.arch).
      k.type = KeyType::Choice;
      k.choices = presetNames();
      k.choices.insert(k.choices.begin(), "");
      const std::vector<std::string> names = k.choices;
      k.set = [set = k.set, names](RunConfig& c, size_t i, const Value& v) {
        std::string s = Conv<std::string>::from(v);
        if (s == "auto") s.clear();  // ai-toolkit's and older Strata files' spelling of ""
        if (names.size() > 1 && std::find(names.begin(), names.end(), s) == names.end()) {
          std::string msg = "expected \"\" (from the weights) or one of:";
          for (size_t n = 1; n < names.size(); ++n) msg += " " + names[n];
          throw ConfigError(msg);
        }
        set(c, i, Value{s});
      };
    }
    if (opt.familyId_) {
      // The choices are the families registered when the schema is built; a value
      // that names none is refused as an enum's unknown spelling is.
      k.type = KeyType::Choice;
      k.choices = familyIds();
      const std::vector<std::string> ids = k.choices;
      k.set = [set = k.set, ids](RunConfig& c, size_t i, const Value& v) {
        const std::string s = Conv<std::string>::from(v);
        if (!ids.empty() && std::find(ids.begin(), ids.end(), s) == ids.end()) {
          std::string msg = "expected one of:";
          for (const auto& id : ids) msg += " " + id;
          throw ConfigError(msg);
        }
        set(c, i, v);
      };
    }
  }
  RunConfig defaults;
  defaults.datasets.resize(1);
  k.defaultValue = k.get(defaults, 0);
  return k;
}

// A row for `path` reading and writing `ref`'s member; its default is the
// member's in a default-constructed RunConfig (one dataset entry).
template <class T>
KeySpec keyRow(std::string path, Accessor<T> ref, std::string doc, Opt opt = {}) {
  return rowOf<T>(
      std::move(path), std::move(doc), std::move(opt),
      [ref](const RunConfig& c, size_t i) { return Conv<T>::to(ref(const_cast<RunConfig&>(c), i)); },
      [ref](RunConfig& c, size_t i, const Value& v) { ref(c, i) = Conv<T>::from(v); });
}

// A row with no member: its value lives in RunConfig::familyValues (a dataset
// key's in its entry's), absent while it is `defaultValue`. A family adds a key
// with this one row and reads it with familyValue<T>().
template <class T>
KeySpec valueRow(std::string path, T defaultValue, std::string doc, Opt opt = {}) {
  const bool inDataset = path.rfind("datasets[].", 0) == 0;
  const auto values = [inDataset](RunConfig& c, size_t i) -> FamilyValues& {
    return inDataset ? c.datasets.at(i).familyValues : c.familyValues;
  };
  const Value def = Conv<T>::to(defaultValue);
  return rowOf<T>(
      path, std::move(doc), std::move(opt),
      [path, def, values](const RunConfig& c, size_t i) {
        const FamilyValues& m = values(const_cast<RunConfig&>(c), i);
        const auto it = m.find(path);
        return it == m.end() ? def : it->second;
      },
      [path, def, values](RunConfig& c, size_t i, const Value& v) {
        const Value typed = Conv<T>::to(Conv<T>::from(v));  // throws for a wrong type; 3 -> 3.0 for a float
        if (typed == def)
          values(c, i).erase(path);
        else
          values(c, i)[path] = typed;
      });
}

}  // namespace rows

// The value of a family's key ("model.foo", "datasets[].bar" with the entry's index)
// as its row's type. Throws ConfigError for a key no registered family has.
template <class T>
T familyValue(const RunConfig& cfg, const std::string& path, size_t datasetIndex = 0) {
  const KeySpec* k = findKey(path);
  if (!k) throw ConfigError("unknown config key '" + path + "'");
  return rows::Conv<T>::from(k->get(cfg, datasetIndex));
}

// Accessors for keyRow: a member of RunConfig, or of the dataset entry the key's index names.
#define STRATA_KEY_MEMBER(member)                         \
  +[](::strata::config::RunConfig & c, size_t) -> auto& { \
    return c.member;                                      \
  }
#define STRATA_KEY_DATASET(member)                          \
  +[](::strata::config::RunConfig & c, size_t i) -> auto& { \
    return c.datasets.at(i).member;                         \
  }

}  // namespace strata::config
