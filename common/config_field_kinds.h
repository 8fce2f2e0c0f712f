// The kinds of configuration field (whole numbers, fractions, booleans, strings, string
// lists) that the schema's entries are made of. Internal to common/config.
//
// Each field names where it lives with a generic accessor, [](auto& c) -> auto& { ... },
// that serves both the setter (mutable config) and the getter (const config).
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/config_fields.h"

namespace kvtier::config_internal {

inline std::string Quote(std::string_view v) { return "\"" + std::string(v) + "\""; }

inline Status OneValue(std::span<const std::string> values) {
  if (values.size() != 1) {
    return InvalidArgumentError("expects a single value, got a list of " +
                                std::to_string(values.size()));
  }
  return Status::Ok();
}

inline Result<uint64_t> ParseUint(std::string_view text, uint64_t min, uint64_t max) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgumentError(Quote(text) + " is out of range " + range);
  }
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(Quote(text) + " is not a whole number in " + range);
  }
  if (value < min || value > max)
    return InvalidArgumentError(Quote(text) + " is out of range " + range);
  return value;
}

// A whole number in [min, max], stored in whatever unsigned type the member has.
template <typename Access>
Field UintField(std::string_view path, std::string_view help, uint64_t min, uint64_t max,
                Access member) {
  Field f{path, help, "[" + std::to_string(min) + ", " + std::to_string(max) + "]", false, {}, {}};
  f.set = [member, min, max](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    KVTIER_ASSIGN_OR_RETURN(const uint64_t value, ParseUint(v[0], min, max));
    auto& slot = member(c);
    slot = static_cast<std::remove_reference_t<decltype(slot)>>(value);
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return std::to_string(member(c)); };
  return f;
}

// A real number within `range` (its text, "(0, 1]" or "[0, 1000]", names it in errors):
// `in_range` says whether a value belongs.
template <typename Access, typename InRange>
Field RealField(std::string_view path, std::string_view help, const std::string& range,
                Access member, InRange in_range) {
  Field f{path, help, range, false, {}, {}};
  f.set = [member, in_range, range](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    double value = 0;
    const auto [end, ec] = std::from_chars(v[0].data(), v[0].data() + v[0].size(), value);
    if (v[0].empty() || ec != std::errc() || end != v[0].data() + v[0].size()) {
      return InvalidArgumentError(Quote(v[0]) + " is not a number in " + range);
    }
    if (!in_range(value)) return InvalidArgumentError(Quote(v[0]) + " is out of range " + range);
    member(c) = value;
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", member(c));
    return std::string(text);
  };
  return f;
}

// A fraction in (0, 1].
template <typename Access>
Field FractionField(std::string_view path, std::string_view help, Access member) {
  return RealField(path, help, "(0, 1]", member, [](double v) { return v > 0 && v <= 1; });
}

// A number in [min, max].
template <typename Access>
Field NumberField(std::string_view path, std::string_view help, double min, double max,
                  Access member) {
  char range[64];
  std::snprintf(range, sizeof(range), "[%g, %g]", min, max);
  return RealField(path, help, range, member,
                   [min, max](double v) { return v >= min && v <= max; });
}

template <typename Access>
Field BoolField(std::string_view path, std::string_view help, Access member) {
  Field f{path, help, "true or false", false, {}, {}};
  f.set = [member](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    if (v[0] == "true")
      member(c) = true;
    else if (v[0] == "false")
      member(c) = false;
    else
      return InvalidArgumentError(Quote(v[0]) + " is not a boolean (allowed: true, false)");
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return member(c) ? "true" : "false"; };
  return f;
}

// `check` validates a non-empty value; an empty string is allowed when `allow_empty`.
template <typename Access>
Field StringField(std::string_view path, std::string_view help, std::string allowed,
                  bool allow_empty, Access member,
                  std::function<Status(std::string_view)> check = {}) {
  Field f{path, help, std::move(allowed), false, {}, {}};
  f.set = [member, allow_empty, check = std::move(check)](
              KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    if (v[0].empty()) {
      if (!allow_empty) return InvalidArgumentError("must not be empty");
    } else if (check) {
      KVTIER_RETURN_IF_ERROR(check(v[0]));
    }
    member(c) = v[0];
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return member(c); };
  return f;
}

// A list of strings, each passing `check` (when set); empty items are refused.
template <typename Member>
Field StringListField(std::string_view path, std::string_view help, std::string allowed,
                      Member member, std::function<Status(std::string_view)> check = nullptr) {
  Field f{path, help, std::move(allowed), true, {}, {}};
  f.set = [member, check = std::move(check)](KvtierConfig& c,
                                             std::span<const std::string> v) -> Status {
    std::vector<std::string> items;
    for (const std::string& item : v) {
      if (item.empty()) {
        if (v.size() == 1) break;  // an empty value: an empty list
        return InvalidArgumentError("a list item is empty");
      }
      if (check) KVTIER_RETURN_IF_ERROR(check(item));
      items.push_back(item);
    }
    member(c) = std::move(items);
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) {
    std::string out;
    for (const std::string& item : member(c)) out += (out.empty() ? "" : ",") + item;
    return out;
  };
  return f;
}

// A list of whole numbers in [min, max].
template <typename Member>
Field UintListField(std::string_view path, std::string_view help, uint32_t min, uint32_t max,
                    Member member) {
  Field f{path,
          help,
          "a list of whole numbers in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
          true,
          {},
          {}};
  f.set = [member, min, max](KvtierConfig& c, std::span<const std::string> v) -> Status {
    std::vector<uint32_t> items;
    for (const std::string& item : v) {
      if (item.empty() && v.size() == 1) break;  // an empty value: an empty list
      uint32_t n = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
      if (item.empty() || ec != std::errc() || end != item.data() + item.size() || n < min ||
          n > max) {
        return InvalidArgumentError(Quote(item) + " is not a whole number in [" +
                                    std::to_string(min) + ", " + std::to_string(max) + "]");
      }
      items.push_back(n);
    }
    member(c) = std::move(items);
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) {
    std::string out;
    for (uint32_t item : member(c)) out += (out.empty() ? "" : ",") + std::to_string(item);
    return out;
  };
  return f;
}

}  // namespace kvtier::config_internal
