#include "text/Tokenizer.h"

#include "common/Error.h"

namespace strata::text {

std::vector<int> Tokenizer::encode(const std::string& text, bool addSpecial) const {
  std::vector<int> body = encodeBody(text);
  return addSpecial ? addSpecialTokens(std::move(body)) : body;
}

TokenizedText Tokenizer::encodeFixed(const std::string& text, int maxLength) const {
  const std::size_t specials = specialTokenCount();
  if (maxLength <= 0 || static_cast<std::size_t>(maxLength) < specials)
    throw ConfigError(source_.string() + ": max_length " + std::to_string(maxLength) + " cannot hold the " +
                      std::to_string(specials) + " special token(s) this tokenizer adds");
  std::vector<int> body = encodeBody(text);
  const std::size_t room = static_cast<std::size_t>(maxLength) - specials;
  TokenizedText out;
  if (body.size() > room) {
    out.droppedTokens = static_cast<std::int64_t>(body.size() - room);
    body.resize(room);
  }
  const std::vector<int> ids = addSpecialTokens(std::move(body));
  out.length = static_cast<std::int64_t>(ids.size());
  out.ids.assign(ids.begin(), ids.end());
  out.mask.assign(ids.size(), 1);
  if (out.ids.size() < static_cast<std::size_t>(maxLength)) {
    const std::optional<int> pad = specialTokenIds().pad;
    if (!pad)
      throw ConfigError(source_.string() + ": padding to max_length " + std::to_string(maxLength) +
                        " needs a pad token, and this tokenizer has none");
    out.ids.resize(static_cast<std::size_t>(maxLength), *pad);
    out.mask.resize(static_cast<std::size_t>(maxLength), 0);
  }
  return out;
}

}  // namespace strata::text
