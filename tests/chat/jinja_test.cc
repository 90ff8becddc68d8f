// Unit tests of the Jinja interpreter: values, expressions, filters, loops, whitespace control,
// errors and limits. Byte-exact agreement with Python jinja2 is in chat_golden_test.cc.
#include "chat/jinja.h"

#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"
#include "chat/pystr.h"
#include "chat/value.h"
#include "core/error.h"

namespace dfl::jinja {
namespace {

std::string render(const std::string& src,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return Template(src).render(Value::from_json(ctx));
}

std::string error_of(const std::string& src,
                     const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  try {
    render(src, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(JinjaValue, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(123456789.125), "123456789.125");
}

TEST(JinjaValue, StrAndRepr) {
  Value v = Value::from_json(
      nlohmann::ordered_json::parse(R"({"b": [1, 2.0, "x", null, true], "a": {}})"));
  EXPECT_EQ(v.str(), "{'b': [1, 2.0, 'x', None, True], 'a': {}}");
  EXPECT_EQ(Value("it's").repr(), "\"it's\"");
  EXPECT_EQ(Value("a\nb\\").repr(), "'a\\nb\\\\'");
  EXPECT_EQ(Value::list({Value(1)}, true).repr(), "(1,)");
  EXPECT_EQ(Value().str(), "");
  EXPECT_FALSE(Value().truthy());
}

TEST(JinjaValue, JsonDumpsMatchesPython) {
  Value v = Value::from_json(
      nlohmann::ordered_json::parse(R"({"z": "ü\n\u0001", "a": [1, 1.5, {}, []]})"));
  JsonDumpOptions opt;
  EXPECT_EQ(py_json_dumps(v, opt), "{\"z\": \"ü\\n\\u0001\", \"a\": [1, 1.5, {}, []]}");
  opt.ensure_ascii = true;
  EXPECT_EQ(py_json_dumps(Value("é🙂"), opt), "\"\\u00e9\\ud83d\\ude42\"");
}

TEST(JinjaValue, StringHelpers) {
  EXPECT_EQ(py_split("  a  b ", std::nullopt, -1, false), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(py_split("a,b,c", std::string(","), 1, true), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(py_strip("\u00a0 x \u3000", std::nullopt, true, true), "x");
  EXPECT_EQ(py_title("hello wORLD o'neil"), "Hello World O'Neil");
  EXPECT_EQ(utf8_length("héllo"), 5u);
}

TEST(JinjaExpr, ArithmeticAndPrecedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 - 4 / 2 }}"), "5.0");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }}"), "64");  // jinja2's ** is left-associative
  EXPECT_EQ(render("{{ -2 ** 2 }}"), "4");
  EXPECT_EQ(render("{{ 1 ~ 2 * 3 }}"), "16");  // ~ binds tighter than + but looser than *
  EXPECT_THROW(render("{{ 'a' ~ 1 + 2 }}"), Error);
  EXPECT_EQ(render("{{ l|length - 1 }}", {{"l", {1, 2, 3}}}), "2");
  EXPECT_EQ(render("{{ 1 if x else 2 }}{{ 3 if not x }}", {{"x", false}}), "23");
}

TEST(JinjaExpr, AttributeAndItemAccess) {
  nlohmann::ordered_json ctx = {{"m", {{"role", "user"}, {"items", 5}}}, {"l", {10, 20, 30}}};
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }}", ctx),
            "user user 30 [20, 30] [30, 20, 10]");
  EXPECT_EQ(render("{{ m.missing is defined }}|{{ m.missing }}|", ctx), "False||");
  EXPECT_EQ(render("{{ m.items()|list|length }}", ctx), "2");
}

TEST(JinjaExpr, StringMethods) {
  EXPECT_EQ(
      render("{{ s.split('</think>')[-1].lstrip('\\n') }}", {{"s", "<think>x</think>\n\nanswer"}}),
      "answer");
  EXPECT_EQ(render("{{ 'abc'.startswith('a') and 'abc'.endswith(('x', 'c')) }}"), "True");
  EXPECT_EQ(render("{{ 'a-b-c'.rsplit('-', 1) }}"), "['a-b', 'c']");
}

TEST(JinjaFilters, Common) {
  EXPECT_EQ(
      render("{{ '  x '|trim }}|{{ 'ab'|upper }}|{{ [1,2]|join('+') }}|{{ none|default('d') }}"),
      "x|AB|1+2|None");
  EXPECT_EQ(render("{{ x|default('d') }}"), "d");
  EXPECT_EQ(render("{{ {'a': 'é'}|tojson }}"), "{\"a\": \"é\"}");
  EXPECT_EQ(render("{{ [1]|tojson(indent=2) }}"), "[\n  1\n]");
  EXPECT_EQ(
      render(
          "{{ ms|selectattr('r', 'equalto', 'u')|map(attribute='c')|join }}",
          {{"ms", {{{"r", "u"}, {"c", "A"}}, {{"r", "a"}, {"c", "B"}}, {{"r", "u"}, {"c", "C"}}}}}),
      "AC");
}

TEST(JinjaLoops, LoopVariablesAndElse) {
  EXPECT_EQ(
      render(
          "{% for x in l %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
          {{"l", {"a", "b"}}}),
      "1a,2b");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{% for x in range(5) if x is odd %}{{ x }}{{ loop.length }}{% endfor %}"),
            "1232");
  EXPECT_EQ(render("{% for k, v in {'a': 1}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1");
  EXPECT_EQ(
      render("{% for x in range(9) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
      "012");
}

TEST(JinjaScoping, LoopScopeAndNamespace) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [5] %}{% set ns.x = i %}{% endfor "
                   "%}{{ ns.x }}"),
            "5");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a   {{- 'b' -}}   c"), "abc");
  EXPECT_EQ(render("a\n{# c #}\nb"), "a\nb");
  EXPECT_EQ(render("x\n"), "x");            // one trailing newline dropped
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");  // lstrip_blocks leaves {{ }} alone
}

TEST(JinjaErrors, SyntaxErrorsCarryLine) {
  std::string e = error_of("line1\nline2 {% if x %}\nline3");
  EXPECT_NE(e.find("line"), std::string::npos) << e;
  EXPECT_NE(e.find("endif"), std::string::npos) << e;
  e = error_of("a\nb\n{{ 1 + }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = error_of("{% frobnicate %}");
  EXPECT_NE(e.find("unknown tag 'frobnicate'"), std::string::npos) << e;
  e = error_of("{{ x|nosuchfilter }}");
  EXPECT_NE(e.find("nosuchfilter"), std::string::npos) << e;
  EXPECT_THROW(Template("{% for x in y %}"), Error);
  EXPECT_THROW(Template("{{ 'unterminated }}"), Error);
  EXPECT_THROW(Template("{% break %}"), Error);
}

TEST(JinjaErrors, RuntimeErrors) {
  std::string e = error_of("\n\n{{ raise_exception('Bad roles') }}");
  EXPECT_NE(e.find("Bad roles"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = error_of("{{ y.attr }}");
  EXPECT_NE(e.find("'y' is undefined"), std::string::npos) << e;
  EXPECT_NE(error_of("{{ m.content.strip() }}", {{"m", nlohmann::ordered_json::object()}}),
            "<no error>");
  EXPECT_NE(error_of("{{ 1 / 0 }}"), "<no error>");
  EXPECT_NE(error_of("{{ [].append(1) }}"), "<no error>");
}

TEST(JinjaLimits, RunawayTemplatesStop) {
  RenderLimits lim;
  lim.max_steps = 10000;
  Template t("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  EXPECT_THROW(t.render(Value::dict(), lim), Error);
  Template rec("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_THROW(rec.render(Value::dict()), Error);
  EXPECT_THROW(render("{{ 'x' * 10000000000 }}"), Error);
  std::string deep(5000, '(');
  EXPECT_THROW(Template("{{ " + deep + " }}"), Error);
}

TEST(ChatTemplateApi, ListOfNamedTemplatesAndNormalization) {
  nlohmann::ordered_json cfg = {
      {"chat_template",
       {{{"name", "default"},
         {"template",
          "D{% for m in messages %}{{ m.role }}{{ m.reasoning_content }}{{ m.content is defined "
          "}}{% endfor %}"}},
        {{"name", "tool_use"}, {"template", "T{{ tools|length }}{{ bos_token }}"}}}},
      {"bos_token", {{"content", "<s>"}}},
      {"eos_token", "</s>"}};
  ChatTemplate t = ChatTemplate::from_config_json(cfg);
  nlohmann::ordered_json msgs = {{{"role", "assistant"}, {"content", nullptr}, {"thinking", "r"}}};
  EXPECT_EQ(render_chat(t, msgs), "DassistantrFalse");
  ChatOptions opt;
  opt.tools = nlohmann::ordered_json::array({{{"name", "f"}}});
  EXPECT_EQ(render_chat(t, msgs, opt), "T1<s>");
  opt.template_name = "default";
  EXPECT_EQ(render_chat(t, msgs, opt).substr(0, 1), "D");
  EXPECT_THROW(ChatTemplate::from_config_json({{"eos_token", "x"}}), Error);
  EXPECT_THROW(ChatTemplate::from_string("{% if %}"), Error);
}

TEST(ChatTemplateApi, AcceptsPlainJsonAndSpecialTokens) {
  nlohmann::json cfg = nlohmann::json::parse(R"({
    "chat_template": "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}{{ tools is none }}{{ enable_thinking is defined }}",
    "bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "unk_token": null})");
  ChatTemplate t = ChatTemplate::from_config_json(cfg);
  nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  ChatOptions opt;
  opt.add_generation_prompt = true;
  EXPECT_EQ(render_chat(t, msgs, opt), "<s><user>hi</s><assistant>TrueFalse");
  opt.extra["enable_thinking"] = false;
  EXPECT_EQ(render_chat(t, msgs, opt), "<s><user>hi</s><assistant>TrueTrue");
  EXPECT_FALSE(t.special_tokens.contains("unk_token"));
  EXPECT_THROW(render_chat(t, nlohmann::json::object(), opt), Error);
}

}  // namespace
}  // namespace dfl::jinja
