// See tokenizer.h.
#include "tools/eval/engine_emu/tokenizer.h"

#include <array>

#include "cacheroute/dataplane/key_id.h"
#include "tools/eval/sim/prefix_cache.h"

namespace cacheroute::engine_emu {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

constexpr std::array<std::string_view, 16> kFiller = {
    "the", "model", "says", "hello", "and", "then", "it",   "keeps",
    "on",  "going", "with", "more",  "of",  "this", "same", "text"};

}  // namespace

void AppendTokens(std::string_view text, std::vector<uint64_t>& out) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    if (i == text.size()) break;
    uint64_t h = 0xcbf29ce484222325ULL;
    while (i < text.size() && !IsSpace(text[i])) {
      h ^= static_cast<unsigned char>(text[i]);
      h *= 0x100000001b3ULL;
      ++i;
    }
    out.push_back(dataplane::Mix64(h));
  }
}

std::vector<uint64_t> Tokenize(std::string_view text) {
  std::vector<uint64_t> out;
  AppendTokens(text, out);
  return out;
}

std::string RenderChat(std::span<const ChatMessage> messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|start|> ";
    out += m.role;
    out += '\n';
    out += m.content;
    out += " <|end|>\n";
  }
  out += "<|start|> assistant\n";
  return out;
}

std::vector<uint64_t> BlockHashesFromTokens(std::span<const uint64_t> tokens) {
  const size_t blocks = tokens.size() / sim::kBlockTokens;
  std::vector<uint64_t> content(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (uint32_t t = 0; t < sim::kBlockTokens; ++t) {
      h = dataplane::Mix64(h ^ tokens[b * sim::kBlockTokens + t]);
    }
    content[b] = h;
  }
  return sim::ChainBlockHashes(content);
}

std::vector<uint64_t> BlockHashesFromHashIds(std::span<const uint64_t> hash_ids,
                                             uint32_t block_size, uint32_t input_length) {
  std::vector<uint64_t> content;
  if (block_size == 0) return content;
  const uint64_t blocks = input_length / sim::kBlockTokens;
  content.reserve(blocks);
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t last_token = k * sim::kBlockTokens + sim::kBlockTokens - 1;
    const uint64_t id_index = last_token / block_size;
    if (id_index >= hash_ids.size()) break;
    content.push_back(dataplane::Mix64(hash_ids[id_index] ^ dataplane::Mix64(k + 1)));
  }
  return sim::ChainBlockHashes(content);
}

std::string_view FillerWord(uint32_t i) { return kFiller[i % kFiller.size()]; }

}  // namespace cacheroute::engine_emu
