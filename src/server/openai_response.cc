#include "server/openai_response.h"

#include <cmath>

namespace dfl::server {

namespace {

// OpenAI prints -9999.0 for a logprob of -inf; JSON has no infinities.
double finite_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

Json bytes_json(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

Json nullable(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

Json tool_calls_json(const std::vector<ToolCall>& calls, int32_t index0, bool with_index) {
  Json a = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c;
    if (with_index) c["index"] = index0 + int32_t(i);
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    a.push_back(std::move(c));
  }
  return a;
}

Json head_json(const ResponseHead& h, const char* object) {
  Json j;
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  return j;
}

}  // namespace

void SpecFigures::add(const RequestStats& s) {
  num_spec_steps += s.draft_steps;
  num_draft_tokens += s.drafted_tokens;
  num_accepted_tokens += s.accepted_tokens;
  committed_in_cycles += s.committed_in_cycles;
  if (acceptance_histogram.size() < s.acceptance_histogram.size())
    acceptance_histogram.resize(s.acceptance_histogram.size(), 0);
  for (size_t i = 0; i < s.acceptance_histogram.size(); ++i)
    acceptance_histogram[i] += s.acceptance_histogram[i];
}

std::string finish_reason_text(FinishReason r, bool tool_calls) {
  if (tool_calls && r != FinishReason::kLength) return "tool_calls";
  return r == FinishReason::kLength ? "length" : "stop";
}

Json spec_metrics_json(const SpecFigures& f) {
  Json s;
  s["num_spec_steps"] = f.num_spec_steps;
  s["num_draft_tokens"] = f.num_draft_tokens;
  s["num_accepted_tokens"] = f.num_accepted_tokens;
  s["mean_acceptance_length"] = f.mean_acceptance_length();
  s["acceptance_histogram"] = f.acceptance_histogram;
  return Json{{"speculative_decoding", std::move(s)}};
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json error_json(const ApiError& e) {
  Json err;
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = nullable(e.param);
  err["code"] = nullable(e.code);
  return Json{{"error", std::move(err)}};
}

Json error_json(int status, const std::string& message, const std::string& param,
                const std::string& code) {
  return error_json(ApiError(status, message, param, code));
}

Json chat_logprobs_json(const std::vector<TokenLogprob>& lp, const TokenText& text) {
  Json content = Json::array();
  for (const TokenLogprob& t : lp) {
    const std::string s = text(t.token);
    Json e;
    e["token"] = s;
    e["logprob"] = finite_logprob(t.logprob);
    e["bytes"] = bytes_json(s);
    Json top = Json::array();
    for (const auto& [id, l] : t.top) {
      const std::string ts = text(id);
      top.push_back(Json{{"token", ts}, {"logprob", finite_logprob(l)}, {"bytes", bytes_json(ts)}});
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return Json{{"content", std::move(content)}};
}

Json completion_logprobs_json(const std::vector<TokenLogprob>& lp, const TokenText& text,
                              int64_t offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offs = Json::array();
  for (const TokenLogprob& t : lp) {
    const std::string s = text(t.token);
    tokens.push_back(s);
    lps.push_back(finite_logprob(t.logprob));
    Json top = Json::object();
    for (const auto& [id, l] : t.top) top[text(id)] = finite_logprob(l);
    tops.push_back(std::move(top));
    offs.push_back(offset);
    offset += int64_t(s.size());
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offs)}};
}

Json whole_response(ApiKind kind, const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                    const Usage& usage, const SpecFigures& spec, const TokenText& text) {
  const bool chat = kind == ApiKind::kChat;
  Json j = head_json(head, chat ? "chat.completion" : "text_completion");
  Json cs = Json::array();
  for (const ChoiceOut& c : choices) {
    Json o;
    o["index"] = c.index;
    if (chat) {
      Json m;
      m["role"] = "assistant";
      const bool blank = c.text.find_first_not_of(" \t\r\n") == std::string::npos;
      m["content"] = !c.tool_calls.empty() && blank ? Json(nullptr) : Json(c.text);
      if (!c.reasoning.empty()) m["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) m["tool_calls"] = tool_calls_json(c.tool_calls, 0, false);
      o["message"] = std::move(m);
      o["logprobs"] = c.want_logprobs ? chat_logprobs_json(c.logprobs, text) : Json(nullptr);
    } else {
      o["text"] = c.text;
      o["logprobs"] = c.want_logprobs ? completion_logprobs_json(c.logprobs, text, 0) : Json(nullptr);
    }
    o["finish_reason"] = c.finish_reason;
    cs.push_back(std::move(o));
  }
  j["choices"] = std::move(cs);
  j["usage"] = usage_json(usage);
  j["metrics"] = spec_metrics_json(spec);
  return j;
}

Json chat_chunk(const ResponseHead& head, int32_t index, bool role, const ChatDelta& d,
                int32_t tool_index0, const Json& logprobs, const std::string& finish_reason,
                const SpecFigures* spec) {
  Json j = head_json(head, "chat.completion.chunk");
  Json delta = Json::object();
  if (role) delta["role"] = "assistant";
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty() || (role && d.reasoning.empty() && d.calls.empty())) delta["content"] = d.content;
  if (!d.calls.empty()) delta["tool_calls"] = tool_calls_json(d.calls, tool_index0, true);
  Json c;
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs;
  c["finish_reason"] = nullable(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  if (spec) j["metrics"] = spec_metrics_json(*spec);
  return j;
}

Json completion_chunk(const ResponseHead& head, int32_t index, const std::string& text,
                      const Json& logprobs, const std::string& finish_reason,
                      const SpecFigures* spec) {
  Json j = head_json(head, "text_completion");
  Json c;
  c["index"] = index;
  c["text"] = text;
  c["logprobs"] = logprobs;
  c["finish_reason"] = nullable(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  if (spec) j["metrics"] = spec_metrics_json(*spec);
  return j;
}

Json usage_chunk(ApiKind kind, const ResponseHead& head, const Usage& usage,
                 const SpecFigures& spec) {
  Json j = head_json(head, kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  j["metrics"] = spec_metrics_json(spec);
  return j;
}

Json models_json(const std::string& name, int64_t created, int32_t max_context) {
  Json m;
  m["id"] = name;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "dflash";
  m["max_model_len"] = max_context;
  return Json{{"object", "list"}, {"data", Json::array({std::move(m)})}};
}

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const Json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace dfl::server
