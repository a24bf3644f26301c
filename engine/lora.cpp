// LoRA adapter bookkeeping (lora.h; docs/engine.md, "LoRA adapters").
#include "engine/lora.h"

#include <xxhash.h>

#include <algorithm>
#include <string>

namespace mocker::engine {

Status checkLoraName(std::string_view name, std::string_view field) {
  const std::string f(field);
  if (name.empty()) return invalidArgument(f + ": an adapter name must not be empty");
  if (name.size() > kMaxLoraNameBytes) {
    return invalidArgument(f + ": an adapter name is at most " + std::to_string(kMaxLoraNameBytes) +
                           " bytes (got " + std::to_string(name.size()) + ")");
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto b = static_cast<unsigned char>(name[i]);
    if (b < 0x20 || b == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      return invalidArgument(f + ": control character 0x" + kHex[b >> 4] + kHex[b & 15] +
                             " at byte " + std::to_string(i) + " of the adapter name");
    }
  }
  return {};
}

std::uint64_t loraHashKey(std::string_view name, std::uint64_t hash_seed) {
  return XXH3_64bits_withSeed(name.data(), name.size(), hash_seed);
}

HashSeeds adapterSeeds(HashSeeds seeds, const std::optional<std::string>& lora) {
  seeds.lora_key = lora ? std::optional(loraHashKey(*lora, seeds.hash_seed)) : std::nullopt;
  return seeds;
}

Result<std::uint32_t> LoraRegistry::intern(std::string_view name) {
  if (const auto it = ids_.find(std::string(name)); it != ids_.end()) return it->second;
  MOCKER_TRY_VOID(checkLoraName(name, "lora"));
  if (names_.size() >= kMaxLoraAdapters) {
    return invalidArgument("lora: this engine already knows " + std::to_string(kMaxLoraAdapters) +
                           " adapters (the most it interns)");
  }
  names_.emplace_back(name);
  const auto id = static_cast<std::uint32_t>(names_.size());
  ids_.emplace(names_.back(), id);
  return id;
}

std::uint32_t LoraRegistry::find(std::string_view name) const {
  const auto it = ids_.find(std::string(name));
  return it == ids_.end() ? 0 : it->second;
}

bool LoraBatch::admits(std::uint32_t id) const {
  if (id == 0 || ids_.size() < max_) return true;
  return std::find(ids_.begin(), ids_.end(), id) != ids_.end();
}

void LoraBatch::add(std::uint32_t id) {
  if (id != 0 && std::find(ids_.begin(), ids_.end(), id) == ids_.end()) ids_.push_back(id);
}

bool LoraResidency::resident(std::uint32_t id) const {
  return std::find(lru_.begin(), lru_.end(), id) != lru_.end();
}

bool LoraResidency::load(std::uint32_t id) {
  if (const auto it = std::find(lru_.begin(), lru_.end(), id); it != lru_.end()) {
    lru_.erase(it);
    lru_.push_back(id);
    return false;
  }
  if (capacity_ == 0) return false;
  if (lru_.size() >= capacity_) lru_.erase(lru_.begin());
  lru_.push_back(id);
  return true;
}

bool LoraResidency::remove(std::uint32_t id) {
  const auto it = std::find(lru_.begin(), lru_.end(), id);
  if (it == lru_.end()) return false;
  lru_.erase(it);
  return true;
}

std::uint32_t LoraResidency::use(std::span<const std::uint32_t> pass_ids) {
  std::uint32_t loaded = 0;
  for (const std::uint32_t id : pass_ids) {
    const auto it = std::find(lru_.begin(), lru_.end(), id);
    if (it != lru_.end()) {
      lru_.erase(it);
    } else {
      ++loaded;
      // Evict the least recently used adapter this pass does not use.
      if (lru_.size() >= capacity_) {
        const auto victim = std::find_if(lru_.begin(), lru_.end(), [&](std::uint32_t v) {
          return std::find(pass_ids.begin(), pass_ids.end(), v) == pass_ids.end();
        });
        if (victim != lru_.end()) lru_.erase(victim);
      }
    }
    lru_.push_back(id);
  }
  return loaded;
}

}  // namespace mocker::engine
