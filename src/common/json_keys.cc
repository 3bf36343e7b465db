#include "common/json_keys.h"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/input.h"

namespace tediserve {
namespace {

using json = nlohmann::json;

// A SAX consumer that builds nothing: it keeps the set of keys seen in each open object and
// stops at the first repeat.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({true, {}, ""});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      duplicate_ = k;
      path_ = Path();
      return false;
    }
    f.current = k;
    return true;
  }
  bool end_object() override { return Pop(); }
  bool start_array(std::size_t) override {
    frames_.push_back({false, {}, ""});
    return true;
  }
  bool end_array() override { return Pop(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    invalid_ = true;
    return false;
  }

  bool invalid() const { return invalid_; }
  const std::string& duplicate() const { return duplicate_; }
  const std::string& path() const { return path_; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string current;  // the key whose value is being read (objects only)
  };
  bool Value() { return true; }
  bool Pop() {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }
  // "top level" or "a.b[]": the enclosing keys, for the message.
  std::string Path() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
      if (frames_[i].object) {
        p += (p.empty() ? "" : ".") + frames_[i].current;
      } else {
        p += "[]";
      }
    }
    return p.empty() ? "the top level" : "'" + p + "'";
  }

  std::vector<Frame> frames_;
  bool invalid_ = false;
  std::string duplicate_, path_;
};

}  // namespace

Status CheckNoDuplicateKeys(std::string_view text, const std::string& where) {
  DuplicateKeyFinder finder;
  json::sax_parse(text.begin(), text.end(), &finder, nlohmann::detail::input_format_t::json,
                  /*strict=*/true);
  if (finder.invalid()) return InvalidArgument(where + ": not valid JSON");
  if (!finder.duplicate().empty() || !finder.path().empty()) {
    return InvalidArgument(where + ": key '" + SanitizeUtf8(finder.duplicate()) +
                           "' appears twice in one object (in " + finder.path() +
                           "); remove one of them");
  }
  return Status::Ok();
}

}  // namespace tediserve
