#include "server/job_state.h"

#include <cstdio>

namespace dfl::server {

void JobState::apply(const JobEvent& ev) {
  ChoiceAcc& c = choices[ev.choice];
  const RequestUpdate& u = ev.update;
  c.text += u.text_delta;
  c.logprobs.insert(c.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
  if (u.finished && !c.finished) {
    c.finished = true;
    c.reason = u.reason;
    c.error = u.error;
    c.stats = ev.stats;
    ++n_finished;
  }
}

Usage JobState::usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens;
  for (const ChoiceAcc& c : choices)
    if (c.stats) u.completion_tokens += c.stats->generated_tokens;
  return u;
}

SpecFigures JobState::spec() const {
  SpecFigures f;
  for (const ChoiceAcc& c : choices)
    if (c.stats) f.add(*c.stats);
  return f;
}

Json JobState::whole(const TokenText& text) const {
  const bool chat = job->req.kind == ApiKind::kChat;
  std::vector<ChoiceOut> out;
  for (int32_t i = 0; i < int32_t(choices.size()); ++i) {
    const ChoiceAcc& c = choices[i];
    ChoiceOut o;
    o.index = i;
    o.want_logprobs = job->req.logprobs;
    o.logprobs = c.logprobs;
    bool tools = false;
    if (chat) {
      ChatOutput parse(reasoning, in_think, job->req.parse_tool_calls, tool_prefix + std::to_string(i));
      ChatDelta a = parse.push(c.text), b = parse.finish();
      o.text = a.content + b.content;
      o.reasoning = a.reasoning + b.reasoning;
      o.tool_calls = std::move(a.calls);
      for (auto& t : b.calls) o.tool_calls.push_back(std::move(t));
      tools = parse.saw_tool_calls();
    } else {
      o.text = c.text;
    }
    o.finish_reason = finish_reason_text(c.reason, tools);
    out.push_back(std::move(o));
  }
  return whole_response(job->req.kind, head, out, usage(), spec(), text);
}

std::string JobState::stream_begin() {
  std::string out;
  if (job->req.kind != ApiKind::kChat) return out;
  for (int32_t i = 0; i < int32_t(choices.size()); ++i) {
    choices[i].chat.emplace(reasoning, in_think, job->req.parse_tool_calls, tool_prefix + std::to_string(i));
    out += sse_event(chat_chunk(head, i, true, ChatDelta{}, 0, Json(nullptr), "", nullptr));
  }
  return out;
}

std::string JobState::stream_update(const JobEvent& ev, const TokenText& text) {
  ChoiceAcc& c = choices[ev.choice];
  const RequestUpdate& u = ev.update;
  const bool chat = job->req.kind == ApiKind::kChat;
  const bool lp = job->req.logprobs && !u.logprobs.empty();
  std::string out;
  if (chat) {
    ChatDelta d = c.chat->push(u.text_delta);
    if (u.finished) {
      ChatDelta f = c.chat->finish();
      d.reasoning += f.reasoning;
      d.content += f.content;
      for (auto& t : f.calls) d.calls.push_back(std::move(t));
    }
    if (!d.empty() || lp) {
      out += sse_event(chat_chunk(head, ev.choice, false, d, c.tool_index,
                                  lp ? chat_logprobs_json(u.logprobs, text) : Json(nullptr), "", nullptr));
      c.tool_index += int32_t(d.calls.size());
    }
  } else if (!u.text_delta.empty() || lp) {
    out += sse_event(completion_chunk(
        head, ev.choice, u.text_delta,
        lp ? completion_logprobs_json(u.logprobs, text, c.text_offset) : Json(nullptr), "", nullptr));
    if (lp)  // offsets count token texts, as in the whole response
      for (const TokenLogprob& t : u.logprobs) c.text_offset += int64_t(text(t.token).size());
  }
  apply(ev);
  if (u.finished) {
    if (u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled) {
      const bool err = u.reason == FinishReason::kError;
      out += sse_event(error_json(err ? 500 : 503, err ? "generation failed: " + u.error
                                                       : "the request was cancelled (server shutting down)"));
      end_status = err ? "error" : "cancelled";
    }
    SpecFigures f;
    if (ev.stats) f.add(*ev.stats);
    const std::string fr = finish_reason_text(u.reason, chat && c.chat->saw_tool_calls());
    out += sse_event(chat ? chat_chunk(head, ev.choice, false, ChatDelta{}, 0, Json(nullptr), fr, &f)
                          : completion_chunk(head, ev.choice, "", Json(nullptr), fr, &f));
  }
  return out;
}

std::string JobState::stream_end() {
  std::string out;
  if (job->req.include_usage) out += sse_event(usage_chunk(job->req.kind, head, usage(), spec()));
  out += kSseDone;
  ended = true;
  return out;
}

std::string JobState::summary(int status) const {
  const Usage u = usage();
  const SpecFigures f = spec();
  std::string finish;
  for (const ChoiceAcc& c : choices)
    finish += std::string(finish.empty() ? "" : ",") + (c.finished ? finish_reason_name(c.reason) : "unfinished");
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s status=%d n=%zu prompt=%lld completion=%lld tau=%.2f accepted=%lld/%lld finish=%s "
                "end=%s time=%.3fs",
                head.id.c_str(), status, choices.size(), (long long)u.prompt_tokens,
                (long long)u.completion_tokens, f.mean_acceptance_length(),
                (long long)f.num_accepted_tokens, (long long)f.num_draft_tokens, finish.c_str(),
                end_status.c_str(), std::chrono::duration<double>(Clock::now() - start).count());
  return buf;
}

}  // namespace dfl::server
