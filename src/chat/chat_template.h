// Chat templates: render a conversation into the prompt string a model was trained on, exactly
// as Hugging Face transformers' `tokenizer.apply_chat_template(..., tokenize=False)` does.
//
// What transformers does, and so do we (render_chat with ChatOptions::hf_normalize = true):
//   - messages: keys whose value is null are dropped; a message with `reasoning_content`,
//     `thinking` or `reasoning` gets both `reasoning_content` and `thinking` set to the first
//     non-null one of those (transformers' reasoning-field aliasing);
//   - the template sees: messages, tools and documents (None when not given, so `tools is
//     defined` holds and `tools is none` tells them apart), add_generation_prompt, the tokenizer's
//     special tokens (bos_token, eos_token, unk_token, pad_token, ... those that are set), then the
//     caller's extra kwargs (which win);
//   - a `chat_template` that is a list of {name, template} picks "tool_use" when tools are given
//     and that entry exists, else "default".
//
// JSON inputs are nlohmann::ordered_json so object keys keep their order (tojson of a tool schema
// must print keys in the order Python would); a plain nlohmann::json converts implicitly but its
// keys come out sorted.
//
// Example:
//   auto tmpl = dfl::ChatTemplate::from_tokenizer_config("…/tokenizer_config.json");
//   dfl::ChatOptions opt;
//   opt.add_generation_prompt = true;
//   opt.extra["enable_thinking"] = false;
//   std::string prompt = dfl::render_chat(tmpl, messages_json, opt);
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dfl {

namespace jinja {
class Template;
}

// Immutable once made (the factories compile every source); safe to share across threads.
struct ChatTemplate {
  // Named template sources; a single-string chat_template is stored as {"default", source}.
  std::vector<std::pair<std::string, std::string>> sources;
  // Special tokens from tokenizer_config.json (name → text), only those that are set, e.g.
  // {"bos_token": "<bos>", "eos_token": "<end_of_turn>"}.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();

  // Reads `chat_template` and the special tokens from a tokenizer_config.json. Throws
  // dfl::Error naming the file when it is missing, is not JSON, has no chat_template, or the
  // template does not parse.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  // Same from an already-parsed tokenizer_config object.
  static ChatTemplate from_config_json(const nlohmann::ordered_json& config);
  // A bare template string; special tokens can be filled in afterwards.
  static ChatTemplate from_string(const std::string& source);

  // The compiled template to use: `name` if non-empty, else "tool_use" when has_tools and
  // present, else "default" (or the only one). Throws dfl::Error when there is no such template.
  const jinja::Template& select(const std::string& name, bool has_tools) const;

  std::vector<std::shared_ptr<const jinja::Template>> compiled;  // parallel to sources
};

struct ChatOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools = nullptr;      // list of tool schemas, or null for none
  nlohmann::ordered_json documents = nullptr;  // list of documents, or null for none
  // Extra template variables, e.g. {"enable_thinking": false}; they override special tokens.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  std::string template_name;  // pick a named template; empty = HF's default choice
  bool hf_normalize = true;   // drop null message keys and alias reasoning fields like HF
};

// Renders `messages` (a JSON array of message objects). Throws dfl::Error on template errors
// (including the template's own raise_exception) with the template line.
std::string render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                        const ChatOptions& opt = {});

}  // namespace dfl
