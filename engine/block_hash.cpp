#include "engine/block_hash.h"

// Inlined (header-only mode): page size 1 hashes every token, and the call into the shared
// library costs as much as the hash of 16 bytes itself. Same function, same values.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "base/check.h"

namespace mocker::engine {
namespace {

void storeLe32(std::uint32_t v, unsigned char* out) {
  out[0] = static_cast<unsigned char>(v);
  out[1] = static_cast<unsigned char>(v >> 8);
  out[2] = static_cast<unsigned char>(v >> 16);
  out[3] = static_cast<unsigned char>(v >> 24);
}

void storeLe64(std::uint64_t v, unsigned char* out) {
  // A plain store on little-endian hosts: the byte loop was not merged into one and cost a
  // quarter of SGLang page-1 replay (one chain step per token).
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  std::memcpy(out, &v, sizeof v);
}

}  // namespace

std::uint64_t contentHash(std::span<const std::uint32_t> tokens, std::uint64_t hash_seed) {
  if constexpr (std::endian::native == std::endian::little) {
    // The in-memory representation already is LE32(t_0) ‖ LE32(t_1) ‖ …: hash it in place.
    return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), hash_seed);
  } else {
    std::vector<unsigned char> buf(tokens.size() * 4);
    for (std::size_t i = 0; i < tokens.size(); ++i) storeLe32(tokens[i], buf.data() + 4 * i);
    return XXH3_64bits_withSeed(buf.data(), buf.size(), hash_seed);
  }
}

std::uint64_t chainHash(std::uint64_t parent, std::uint64_t content, std::uint64_t chain_seed) {
  std::array<unsigned char, 16> buf;
  storeLe64(parent, buf.data());
  storeLe64(content, buf.data() + 8);
  return XXH3_64bits_withSeed(buf.data(), buf.size(), chain_seed);
}

namespace {

std::uint64_t rawHash(std::uint64_t h) { return h; }
std::uint64_t rawHash(BlockHash h) { return h.value(); }

// One chain for both the raw (wire) and the typed (scheduler) form.
template <typename Hash>
void extendChain(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                 const HashSeeds& seeds, std::vector<Hash>& hashes) {
  MOCKER_CHECK(block_size >= 1);
  const std::size_t num_full = tokens.size() / block_size;
  std::uint64_t parent = hashes.empty() ? 0 : rawHash(hashes.back());
  // NOTE: prompts often repeat a block's tokens in the next block (replayed traces expand each
  // trace hash id into a run of one token), so a block equal to its predecessor reuses the
  // predecessor's content hash: same c_i, one XXH3 call instead of two.
  std::span<const std::uint32_t> previous;
  std::uint64_t previous_c = 0;
  // One allocation for a whole prompt; growth stays geometric for one-block extensions.
  if (num_full > hashes.capacity()) hashes.reserve(std::max(num_full, 2 * hashes.capacity()));
  for (std::size_t i = hashes.size(); i < num_full; ++i) {
    const std::span<const std::uint32_t> block = tokens.subspan(i * block_size, block_size);
    const bool repeat =
        !previous.empty() &&
        (block_size == 1 ? block[0] == previous[0]
                         : std::equal(block.begin(), block.end(), previous.begin()));
    const std::uint64_t c = repeat ? previous_c : contentHash(block, seeds.hash_seed);
    if (i > 0) {
      parent = chainHash(parent, c, seeds.chain_seed);
    } else {
      parent = seeds.lora_key ? chainHash(*seeds.lora_key, c, seeds.chain_seed) : c;
    }
    hashes.push_back(Hash{parent});
    previous = block;
    previous_c = c;
  }
}

}  // namespace

void extendSequenceHashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          const HashSeeds& seeds, std::vector<BlockHash>& hashes) {
  extendChain(tokens, block_size, seeds, hashes);
}

void extendSequenceHashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          const HashSeeds& seeds, std::vector<std::uint64_t>& hashes) {
  extendChain(tokens, block_size, seeds, hashes);
}

std::vector<std::uint64_t> sequenceHashes(std::span<const std::uint32_t> tokens,
                                          std::uint32_t block_size, const HashSeeds& seeds) {
  std::vector<std::uint64_t> hashes;
  hashes.reserve(tokens.size() / (block_size == 0 ? 1 : block_size));
  extendChain(tokens, block_size, seeds, hashes);
  return hashes;
}

}  // namespace mocker::engine
