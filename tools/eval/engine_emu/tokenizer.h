// The engine emulator's deterministic stand-in for a tokenizer, and the block hashes vLLM's prefix
// cache would compute from the tokens (docs/references.md, "Engines": 16-token blocks,
// each block's hash chaining its parent's).
//
// Tokens. One token per maximal run of non-white-space bytes (white space: space, \t, \n, \r, \f,
// \v); a token's id is Mix64(FNV-1a-64 of its bytes). No vocabulary, no byte-pair merges: what
// matters to the prefix cache is only that equal text prefixes give equal token prefixes, which
// this keeps (a prefix ending inside a word differs in that word's token, as with BPE).
//
// Chat. Messages are rendered with a fixed template, one message after another, so a conversation
// that extends another keeps its token prefix:
//   <|start|> ROLE\nCONTENT <|end|>\n   for every message, then   <|start|> assistant\n
//
// Emulator extension. A request may describe its prompt's blocks directly (cacheroute_hash_ids at
// cacheroute_block_size tokens per id, cacheroute_input_length tokens in all), as workload traces
// do. BlockHashesFromHashIds expands those into 16-token blocks: sub-block k (tokens [16k, 16k+16))
// gets the content id Mix64(id ^ Mix64(k)), where id is the trace id of the block holding the
// sub-block's last token. Trace ids chain (equal id i means equal prompts through block i), so two
// prompts share a 16-token block exactly when they share the trace block(s) covering it.
//
// Usage:
//   std::vector<uint64_t> tokens = Tokenize(RenderChat(messages));
//   std::vector<uint64_t> hashes = BlockHashesFromTokens(tokens);   // one per full 16-token block
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cacheroute::engine_emu {

// Appends the ids of `text`'s tokens to `out`.
void AppendTokens(std::string_view text, std::vector<uint64_t>& out);
std::vector<uint64_t> Tokenize(std::string_view text);

struct ChatMessage {
  std::string role;
  std::string content;
};
std::string RenderChat(std::span<const ChatMessage> messages);

// Chained hashes (sim::ChainBlockHashes) of the full 16-token blocks of `tokens`.
std::vector<uint64_t> BlockHashesFromTokens(std::span<const uint64_t> tokens);

// Chained hashes of the full 16-token blocks of an input_length-token prompt described by trace
// ids at block_size (≥ 1) tokens each. Sub-blocks whose last token lies past the ids given have no
// hash (they are never cached); ids past the prompt are ignored.
std::vector<uint64_t> BlockHashesFromHashIds(std::span<const uint64_t> hash_ids,
                                             uint32_t block_size, uint32_t input_length);

// The i-th word of the emulator's generated text (deterministic filler; one token each).
std::string_view FillerWord(uint32_t i);

}  // namespace cacheroute::engine_emu
