#include "chat/chat_template.h"

#include "chat/jinja.h"
#include "chat/value.h"
#include "core/error.h"
#include "core/mmap.h"

namespace dfl {
namespace {

// The special-token attributes transformers puts in special_tokens_map (the ones that are set).
const char* const kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};

// A token entry is either a string or an AddedToken-like {"content": "..."} object.
const nlohmann::ordered_json* token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return &v;
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return &*it;
  }
  return nullptr;
}

void compile_all(ChatTemplate& t) {
  t.compiled.clear();
  for (const auto& [name, src] : t.sources) {
    try {
      t.compiled.push_back(std::make_shared<const jinja::Template>(src));
    } catch (const Error& e) {
      throw Error(str("chat template '", name, "': ", e.what()));
    }
  }
}

// transformers' _alias_reasoning_fields after _normalize_chat_messages.
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    if (!m.is_object()) {
      out.push_back(m);
      continue;
    }
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) msg[it.key()] = it.value();
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = msg.find(key);
      if (it != msg.end()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning) {
      // {"thinking": r, **message, "reasoning_content": r}: `thinking` keeps its position when
      // present (it is then overwritten by nothing), else goes first; reasoning_content is
      // updated in place or appended.
      nlohmann::ordered_json r = *reasoning;
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      if (!msg.contains("thinking")) aliased["thinking"] = r;
      for (auto it = msg.begin(); it != msg.end(); ++it) aliased[it.key()] = it.value();
      aliased["reasoning_content"] = r;
      msg = std::move(aliased);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_config_json(const nlohmann::ordered_json& config) {
  DFL_CHECK(config.is_object(), "tokenizer config must be a JSON object");
  ChatTemplate t;
  auto ct = config.find("chat_template");
  DFL_CHECK(ct != config.end() && !ct->is_null(),
            "tokenizer config has no chat_template; pass a template explicitly");
  if (ct->is_string()) {
    t.sources.emplace_back("default", ct->get<std::string>());
  } else {
    DFL_CHECK(ct->is_array(), "chat_template must be a string or a list of {name, template}");
    for (const auto& e : *ct) {
      DFL_CHECK(e.is_object() && e.contains("name") && e.contains("template") &&
                    e["name"].is_string() && e["template"].is_string(),
                "chat_template list entries must be {\"name\": str, \"template\": str}");
      t.sources.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
    }
  }
  for (const char* key : kSpecialTokenKeys) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (const nlohmann::ordered_json* text = token_text(*it)) t.special_tokens[key] = *text;
  }
  auto extra = config.find("extra_special_tokens");
  if (extra != config.end() && extra->is_object()) {
    for (auto it = extra->begin(); it != extra->end(); ++it)
      if (const nlohmann::ordered_json* text = token_text(it.value()))
        t.special_tokens[it.key()] = *text;
  }
  compile_all(t);
  return t;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  std::string text = read_text_file(path);
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(text, nullptr, false);
  DFL_CHECK(!config.is_discarded(), path, ": not valid JSON");
  try {
    return from_config_json(config);
  } catch (const Error& e) {
    throw Error(str(path, ": ", e.what()));
  }
}

ChatTemplate ChatTemplate::from_string(const std::string& source) {
  ChatTemplate t;
  t.sources.emplace_back("default", source);
  compile_all(t);
  return t;
}

const jinja::Template& ChatTemplate::select(const std::string& name, bool has_tools) const {
  DFL_CHECK(compiled.size() == sources.size() && !sources.empty(),
            "chat template is empty (make it with a ChatTemplate factory)");
  auto find = [&](const std::string& n) -> const jinja::Template* {
    for (size_t i = 0; i < sources.size(); ++i)
      if (sources[i].first == n) return compiled[i].get();
    return nullptr;
  };
  if (!name.empty()) {
    const jinja::Template* t = find(name);
    DFL_CHECK(t, "no chat template named '", name, "'");
    return *t;
  }
  if (sources.size() == 1) return *compiled[0];
  if (has_tools) {
    if (const jinja::Template* t = find("tool_use")) return *t;
  }
  const jinja::Template* t = find("default");
  DFL_CHECK(t, "no 'default' chat template; choose one by name");
  return *t;
}

std::string render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                        const ChatOptions& opt) {
  DFL_CHECK(messages.is_array(), "messages must be a JSON array of message objects");
  for (const auto& m : messages) DFL_CHECK(m.is_object(), "each message must be a JSON object");
  const jinja::Template& t = tmpl.select(opt.template_name, !opt.tools.is_null());
  jinja::Value ctx = jinja::Value::dict();
  auto& d = ctx.as_dict();
  d.set(jinja::Value("messages"),
        jinja::Value::from_json(opt.hf_normalize ? normalize_messages(messages) : messages));
  d.set(jinja::Value("tools"), jinja::Value::from_json(opt.tools));
  d.set(jinja::Value("documents"), jinja::Value::from_json(opt.documents));
  d.set(jinja::Value("add_generation_prompt"), jinja::Value(opt.add_generation_prompt));
  for (auto it = tmpl.special_tokens.begin(); it != tmpl.special_tokens.end(); ++it)
    d.set(jinja::Value(it.key()), jinja::Value::from_json(it.value()));
  if (opt.extra.is_object()) {
    for (auto it = opt.extra.begin(); it != opt.extra.end(); ++it)
      d.set(jinja::Value(it.key()), jinja::Value::from_json(it.value()));
  }
  return t.render(ctx);
}

}  // namespace dfl
