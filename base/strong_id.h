// StrongId<Tag, Rep>: a typed integer identifier so that RequestId, BlockId, BlockHash and SeqNo
// cannot be mixed up. Comparable, hashable (std::hash specialisation for unordered containers
// used as lookup tables only — never for output order), printable via value().
//
// Header-only value type.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace mocker {

template <typename Tag, typename Rep = std::uint64_t>
class StrongId {
 public:
  using rep_type = Rep;

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}

  constexpr Rep value() const { return value_; }

  friend constexpr auto operator<=>(StrongId, StrongId) = default;

 private:
  Rep value_{};
};

}  // namespace mocker

template <typename Tag, typename Rep>
struct std::hash<mocker::StrongId<Tag, Rep>> {
  std::size_t operator()(mocker::StrongId<Tag, Rep> id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
