#include "server/openai_request.h"

#include "chat/content_parts.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace dfl::server {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;  // nesting deeper than this is refused before parsing

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "': " + what, param);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* want, const Json& v) {
  bad(param, std::string("expected ") + want + ", got " + type_name(v));
}

// Nesting depth of a JSON text (brackets outside strings); stops counting once over the limit.
bool too_deep(std::string_view s) {
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

std::string fmt_num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Field readers: nullptr when absent or null; a wrong type is a 400 naming the field.
const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const Json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

double get_number(const Json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(param, "must be a number in [" + fmt_num(lo) + ", " + fmt_num(hi) + "]");
  return x;
}

int64_t get_int(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 9e15) {
    x = static_cast<int64_t>(v.get<double>());  // 16.0 is accepted as 16, like Python clients
  } else {
    wrong_type(param, "an integer", v);
  }
  if (x < lo || x > hi)
    bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                   std::to_string(x));
  return x;
}

const std::string& get_string(const Json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get_ref<const std::string&>();
}

std::vector<int32_t> get_ids(const Json& arr, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i)
    ids.push_back(static_cast<int32_t>(
        get_int(arr[i], param + "[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

// A message's content: a string, null, or text parts joined.
Json message_content(const Json& c, const std::string& param) {
  if (c.is_null() || c.is_string()) return c;
  if (!c.is_array()) wrong_type(param, "a string or an array of content parts", c);
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const Json& part = c[i];
    if (!part.is_object()) wrong_type(p, "a content part object", part);
    const Json* type = field(part, "type");
    if (type && type->is_string())
      if (const std::string kind = media_part_kind(type->get_ref<const std::string&>()); !kind.empty())
        bad(p + ".type", media_refusal(kind));
    if (!type || get_string(*type, p + ".type") != "text")
      bad(p + ".type", "only \"text\" content parts are supported");
    const Json* t = field(part, "text");
    if (!t) bad(p + ".text", "is required");
    text += get_string(*t, p + ".text");
  }
  return text;
}

Json parse_messages(const Json& msgs) {
  if (!msgs.is_array()) wrong_type("messages", "an array", msgs);
  if (msgs.empty()) bad("messages", "must not be empty");
  Json out = Json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const Json& m = msgs[i];
    if (!m.is_object()) wrong_type(p, "an object", m);
    const Json* role = field(m, "role");
    if (!role) bad(p + ".role", "is required");
    const std::string& r = get_string(*role, p + ".role");
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      bad(p + ".role", "must be one of system, developer, user, assistant, tool; got '" + r + "'");
    Json msg = m;  // other keys (name, tool_calls, tool_call_id, ...) reach the template as given
    msg["role"] = r == "developer" ? "system" : r;
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      if (r != "assistant") bad(p + ".content", "is required");
      msg["content"] = "";  // templates concatenate content; an assistant turn may be tool calls only
    } else {
      msg["content"] = message_content(*c, p + ".content");
    }
    if (const Json* tc = field(m, "tool_calls"); tc && !tc->is_array())
      wrong_type(p + ".tool_calls", "an array", *tc);
    out.push_back(std::move(msg));
  }
  return out;
}

Prompt parse_prompt(const Json& p) {
  Prompt out;
  if (p.is_string()) {
    out.text = p.get<std::string>();
  } else if (p.is_array()) {
    if (p.empty()) bad("prompt", "must not be empty");
    if (p[0].is_string() || p[0].is_array()) {
      if (p.size() != 1) bad("prompt", "batches of several prompts are not supported; send one per request");
      if (p[0].is_string()) out.text = p[0].get<std::string>();
      else out.ids = get_ids(p[0], "prompt[0]");
    } else {
      out.ids = get_ids(p, "prompt");
    }
  } else {
    wrong_type("prompt", "a string or an array of token ids", p);
  }
  if (out.ids.empty() && out.text.empty()) bad("prompt", "must not be empty");
  return out;
}

Json parse_tools(const Json& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    const Json* type = field(t, "type");
    if (type && get_string(*type, p + ".type") != "function")
      bad(p + ".type", "only \"function\" tools are supported");
    const Json* fn = field(t, "function");
    if (!fn) bad(p + ".function", "is required");
    if (!fn->is_object()) wrong_type(p + ".function", "an object", *fn);
    const Json* name = field(*fn, "name");
    if (!name) bad(p + ".function.name", "is required");
    get_string(*name, p + ".function.name");
  }
  return tools;
}

// tool_choice: returns false for "none".
bool parse_tool_choice(const Json& c) {
  if (c.is_string()) {
    const std::string& s = c.get_ref<const std::string&>();
    if (s != "none" && s != "auto" && s != "required")
      bad("tool_choice", "must be \"none\", \"auto\", \"required\" or a function object");
    return s != "none";
  }
  if (!c.is_object()) wrong_type("tool_choice", "a string or an object", c);
  const Json* fn = field(c, "function");
  if (!fn || !fn->is_object()) bad("tool_choice.function", "is required (an object with a name)");
  const Json* name = field(*fn, "name");
  if (!name) bad("tool_choice.function.name", "is required");
  get_string(*name, "tool_choice.function.name");
  return true;
}

void parse_stop(const Json& s, const ParseLimits& lim, std::vector<std::string>& out) {
  auto add = [&](const Json& v, const std::string& p) {
    const std::string& t = get_string(v, p);
    if (t.empty()) bad(p, "must not be empty");
    if (int64_t(t.size()) > lim.max_stop_len)
      bad(p, "is longer than " + std::to_string(lim.max_stop_len) + " bytes");
    out.push_back(t);
  };
  if (s.is_string()) {
    add(s, "stop");
    return;
  }
  if (!s.is_array()) wrong_type("stop", "a string or an array of strings", s);
  if (int64_t(s.size()) > lim.max_stop)
    bad("stop", "at most " + std::to_string(lim.max_stop) + " stop sequences");
  for (size_t i = 0; i < s.size(); ++i) add(s[i], "stop[" + std::to_string(i) + "]");
}

void parse_speculative(const Json& s, Request& r) {
  if (!s.is_object()) wrong_type("speculative", "an object", s);
  if (const Json* e = field(s, "enabled")) r.speculative = get_bool(*e, "speculative.enabled");
  if (const Json* b = field(s, "block_size")) {
    if (b->is_string()) {
      if (b->get_ref<const std::string&>() != "auto")
        bad("speculative.block_size", "must be an integer >= 1 or \"auto\"");
      r.block_size = kBlockAuto;
    } else {
      r.block_size = static_cast<int32_t>(get_int(*b, "speculative.block_size", 1, 1024));
    }
  }
}

}  // namespace

ParsedRequest parse_openai_request(ApiKind kind, std::string_view body, const ParseLimits& lim) {
  if (too_deep(body))
    throw ApiError(400, "the request body nests deeper than " + std::to_string(kMaxDepth) + " levels");
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");

  ParsedRequest out;
  out.kind = kind;
  Request& r = out.engine;
  const bool chat = kind == ApiKind::kChat;

  if (const Json* m = field(j, "model")) out.model = get_string(*m, "model");
  if (chat) {
    const Json* m = field(j, "messages");
    if (!m) bad("messages", "is required");
    r.prompt.messages = parse_messages(*m);
  } else {
    const Json* p = field(j, "prompt");
    if (!p) bad("prompt", "is required");
    r.prompt = parse_prompt(*p);
  }

  const char* mt_key = chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const Json* v = field(j, mt_key)) {
    r.max_tokens = static_cast<int32_t>(get_int(*v, mt_key, 1, std::numeric_limits<int32_t>::max()));
    out.max_tokens_set = true;
  }
  if (const Json* v = field(j, "temperature")) r.sampling.temperature = float(get_number(*v, "temperature", 0, 2));
  if (const Json* v = field(j, "top_p")) {
    r.sampling.top_p = float(get_number(*v, "top_p", 0, 1));
    if (r.sampling.top_p <= 0) bad("top_p", "must be in (0, 1]");
  }
  if (const Json* v = field(j, "top_k")) {
    const int64_t k = get_int(*v, "top_k", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    r.sampling.top_k = k <= 0 ? 0 : static_cast<int32_t>(k);  // vLLM's -1 (and 0) = off
  }
  if (const Json* v = field(j, "min_p")) r.sampling.min_p = float(get_number(*v, "min_p", 0, 1));
  if (const Json* v = field(j, "seed"))
    r.sampling.seed = static_cast<uint64_t>(
        get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  if (const Json* v = field(j, "stop")) parse_stop(*v, lim, r.stop);
  if (const Json* v = field(j, "n")) out.n = static_cast<int32_t>(get_int(*v, "n", 1, lim.max_n));

  if (chat) {
    if (const Json* v = field(j, "logprobs")) out.logprobs = get_bool(*v, "logprobs");
    if (const Json* v = field(j, "top_logprobs")) {
      const int64_t k = get_int(*v, "top_logprobs", 0, lim.max_top_logprobs);
      if (!out.logprobs && k > 0) bad("top_logprobs", "needs \"logprobs\": true");
      r.top_logprobs = out.logprobs ? static_cast<int32_t>(k) : -1;
    } else if (out.logprobs) {
      r.top_logprobs = 0;
    }
  } else if (const Json* v = field(j, "logprobs")) {
    r.top_logprobs = static_cast<int32_t>(get_int(*v, "logprobs", 0, lim.max_top_logprobs));
    out.logprobs = true;
  }

  if (const Json* v = field(j, "stream")) out.stream = get_bool(*v, "stream");
  if (const Json* so = field(j, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (const Json* v = field(*so, "include_usage"))
      out.include_usage = get_bool(*v, "stream_options.include_usage");
  }

  if (chat) {
    if (const Json* v = field(j, "tools"); v) {
      r.prompt.tools = parse_tools(*v);
      if (r.prompt.tools.empty()) r.prompt.tools = nullptr;
    }
    bool choice = true;
    if (const Json* v = field(j, "tool_choice")) choice = parse_tool_choice(*v);
    out.parse_tool_calls = !r.prompt.tools.is_null() && choice;
    if (!choice) r.prompt.tools = nullptr;  // "none": the model is not shown the tools
    if (const Json* v = field(j, "chat_template_kwargs")) {
      if (!v->is_object()) wrong_type("chat_template_kwargs", "an object", *v);
      r.prompt.template_kwargs = *v;
      if (const Json* t = field(*v, "enable_thinking"))
        out.enable_thinking = get_bool(*t, "chat_template_kwargs.enable_thinking") ? 1 : 0;
    }
  }
  if (const Json* v = field(j, "ignore_eos")) r.ignore_eos = get_bool(*v, "ignore_eos");
  if (const Json* v = field(j, "speculative")) parse_speculative(*v, r);
  return out;
}

}  // namespace dfl::server
