#!/usr/bin/env python3
"""Golden outputs for dflash.cpp's Jinja interpreter and chat-template renderer (tests/chat/).

Writes tests/fixtures/chat/template_goldens.json with two sections:

  conversations: real chat templates (Qwen3, Gemma 3 from ../shared/data/tokenizers/) rendered for
      a set of conversations by transformers' own `tokenizer.apply_chat_template(tokenize=False)`,
      cross-checked against a standalone jinja2 environment built the way transformers builds it
      (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + loopcontrols, HF's
      tojson / raise_exception / strftime_now / namespace / dict, None-valued message keys dropped,
      reasoning fields aliased). Template errors are recorded as {"error": message}.
  snippets: small templates exercising the interpreter (expressions, filters, loops, whitespace
      control), rendered by that same standalone environment with a given context.

Regenerate (needs PyPI jinja2>=3.1.6, transformers):
    python3 tools/ref/make_template_goldens.py [--shared ../shared] [--out tests/fixtures/chat/template_goldens.json]
"""

import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# ---- a jinja2 environment configured like transformers' _compile_jinja_template ----------------
def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    return env


ENV = make_env()


def hf_normalize(messages):
    """transformers' _normalize_chat_messages (drop None values) + _alias_reasoning_fields."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in ("reasoning_content", "thinking", "reasoning")
                          if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render_standalone(source, special_tokens, case):
    kwargs = dict(special_tokens)
    kwargs.update(case.get("extra", {}))
    return ENV.from_string(source).render(
        messages=hf_normalize(case["messages"]), tools=case.get("tools"), documents=None,
        add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)


def outcome(fn):
    try:
        return {"expected": fn()}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


# ---- conversations -------------------------------------------------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                        "top_k": {"type": "integer", "default": 3}},
                       "required": ["query"]},
    },
}


def u(text):
    return {"role": "user", "content": text}


def a(text, **kw):
    return {"role": "assistant", "content": text, **kw}


def s(text):
    return {"role": "system", "content": text}


def tool_msg(text):
    return {"role": "tool", "content": text}


def call(name, args, wrap=True):
    fn = {"name": name, "arguments": args}
    return {"type": "function", "function": fn} if wrap else fn


QWEN3_CASES = [
    ("user_gen", [u("Hello!")], {"add_generation_prompt": True}),
    ("user_nogen", [u("Hello!")], {}),
    ("system_user_gen", [s("You are a helpful assistant."), u("What is 2+2?")],
     {"add_generation_prompt": True}),
    ("system_user_assistant", [s("Be brief."), u("Hi"), a("Hello! How can I help?")], {}),
    ("multi_turn_gen", [u("Name a color."), a("Blue."), u("Another one?")],
     {"add_generation_prompt": True}),
    ("think_last_turn", [u("What is 3*7?"), a("<think>\n3*7 = 21\n</think>\n\n21")], {}),
    ("think_earlier_turn_stripped",
     [u("What is 3*7?"), a("<think>\nmultiply\n</think>\n\n21"), u("And 4*5?")],
     {"add_generation_prompt": True}),
    ("reasoning_content_field",
     [u("Why is the sky blue?"), a("Rayleigh scattering.", reasoning_content="Short wavelengths scatter more.")],
     {}),
    ("reasoning_content_earlier",
     [u("q1"), a("a1", reasoning_content="r1"), u("q2"), a("a2", reasoning_content="r2")], {}),
    ("thinking_alias_field", [u("Hi"), a("Hello.", thinking="The user greets me.")], {}),
    ("reasoning_none_with_think_tags",
     [u("Hi"), a("<think>greet back</think>Hello!", reasoning_content=None)], {}),
    ("enable_thinking_false_gen", [u("Quick answer: capital of France?")],
     {"add_generation_prompt": True, "extra": {"enable_thinking": False}}),
    ("enable_thinking_true_gen", [u("Think hard: 17*23?")],
     {"add_generation_prompt": True, "extra": {"enable_thinking": True}}),
    ("enable_thinking_false_nogen", [u("Hi"), a("Hello")], {"extra": {"enable_thinking": False}}),
    ("unicode", [s("Réponds en français 🇫🇷."), u("Ça va? 你好，世界！ 🙂 ñ ü ß"),
                 a("Très bien — 谢谢! ✨")], {"add_generation_prompt": True}),
    ("tools_no_system", [u("Weather in Paris?")],
     {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}),
    ("tools_with_system", [s("You are a weather bot."), u("Weather in Oslo and Zürich?")],
     {"add_generation_prompt": True, "tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ("tool_call_roundtrip",
     [u("Weather in Paris?"),
      a("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})]),
      tool_msg('{"temp": 21, "sky": "clear"}')],
     {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}),
    ("tool_call_string_args",
     [u("Search cats"), a("", tool_calls=[call("search", '{"query": "cats"}')]),
      tool_msg("Cats are small carnivorous mammals.")],
     {"add_generation_prompt": True, "tools": [SEARCH_TOOL]}),
    ("tool_calls_multiple_with_content",
     [u("Weather in Oslo and Rome?"),
      a("Let me check both.", tool_calls=[call("get_weather", {"city": "Oslo"}),
                                          call("get_weather", {"city": "Rome"})]),
      tool_msg('{"temp": -3}'), tool_msg('{"temp": 18}'),
      a("Oslo is -3°C and Rome is 18°C.")],
     {"tools": [WEATHER_TOOL]}),
    ("tool_call_unwrapped_function",
     [u("Search dogs"), a(None, tool_calls=[call("search", {"query": "dogs", "top_k": 5}, wrap=False)]),
      tool_msg("Dogs are domesticated wolves.")],
     {"add_generation_prompt": True, "tools": [SEARCH_TOOL]}),
    ("multi_step_tools_thinking",
     [s("Use tools."), u("Plan a trip to Oslo."),
      a("<think>\nneed weather\n</think>\n\n", tool_calls=[call("get_weather", {"city": "Oslo"})]),
      tool_msg('{"temp": 5}'),
      a("<think>\nnow search\n</think>\n\nSearching.", tool_calls=[call("search", {"query": "Oslo sights"})]),
      tool_msg("Vigeland park, Opera house"),
      a("<think>\nsummarize\n</think>\n\nPack a coat; visit the Opera.")],
     {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ("user_tool_response_content",
     [u("First question"), a("ok"), u("<tool_response>\nraw data\n</tool_response>"),
      a("<think>\nr\n</think>\n\nfinal")], {}),
    ("system_in_middle", [u("Hi"), a("Hello"), s("Now answer in German."), u("How are you?")],
     {"add_generation_prompt": True}),
    ("empty_contents", [s(""), u(""), a("")], {"add_generation_prompt": True}),
    ("braces_and_whitespace",
     [u("Render {{ this }} and {% that %} literally.\n\n  Indented line\t\n"),
      a("  Sure: {# not a comment #}  ")], {"add_generation_prompt": True}),
    ("think_only_content", [u("x"), a("<think>\n\n</think>\n\n")], {}),
    ("long_multi_turn",
     [s("sys")] + [m for i in range(5) for m in (u(f"question {i}"), a(f"<think>t{i}</think>answer {i}"))],
     {"add_generation_prompt": True, "extra": {"enable_thinking": False}}),
]

GEMMA3_CASES = [
    ("user_gen", [u("Hello!")], {"add_generation_prompt": True}),
    ("system_user_gen", [s("You are terse."), u("Explain gravity.")], {"add_generation_prompt": True}),
    ("multi_turn", [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")],
     {"add_generation_prompt": True}),
    ("assistant_last_nogen", [u("Hi"), a("Hello!")], {}),
    ("content_parts",
     [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is in this image?  "}]}],
     {"add_generation_prompt": True}),
    ("system_parts",
     [{"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
      {"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image"}]}],
     {"add_generation_prompt": True}),
    ("trimmed_whitespace", [u("\n\n  padded question \t\n"), a("  padded answer  ")], {}),
    ("unicode", [u("Grüße! 日本語のテキスト 🚀"), a("Danke — ありがとう")], {"add_generation_prompt": True}),
    ("roles_not_alternating", [u("one"), u("two")], {"add_generation_prompt": True}),
    ("assistant_first_error", [a("I start"), u("no")], {}),
]


def load_template(shared, name):
    path = os.path.join(shared, "data", "tokenizers", name, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    return path, cfg["chat_template"]


def conversations(shared):
    from transformers import AutoTokenizer

    out_templates, out_cases = {}, []
    for name, cases in (("qwen3", QWEN3_CASES), ("gemma3", GEMMA3_CASES)):
        path, source = load_template(shared, name)
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path))
        special = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        out_templates[name] = {"source": source, "special_tokens": special}
        for case_name, messages, opts in cases:
            case = {"name": f"{name}/{case_name}", "template": name, "messages": messages,
                    "tools": opts.get("tools"),
                    "add_generation_prompt": opts.get("add_generation_prompt", False),
                    "extra": opts.get("extra", {})}
            hf = outcome(lambda: tok.apply_chat_template(
                [dict(m) for m in messages], tools=case["tools"], tokenize=False,
                add_generation_prompt=case["add_generation_prompt"], **case["extra"]))
            mine = outcome(lambda: render_standalone(source, special, case))
            if hf != mine:
                sys.exit(f"{case['name']}: transformers and the standalone environment disagree:\n"
                         f"{hf!r}\n{mine!r}")
            case.update(hf)
            out_cases.append(case)
    return out_templates, out_cases


# ---- snippets: (template, context) rendered by the standalone environment -------------------------
MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello", "extra": None}]

SNIPPETS = [
    # literals, arithmetic, python-ish str()
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("{{ 10 / 4 }} {{ 10 / 2 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1.0e-5 }} {{ 3.0 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }} {{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }}", {}),
    ("{{ ('a', 1) }} {{ (1,) }} {{ () }} {{ 'it\\'s' }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }} {{ -3 }} {{ - 2.5 }} {{ +4 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ 'b' >= 'a' }} {{ [1,2] < [1,3] }}", {}),
    ("{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ not 1 }} {{ not (1 and 0) }}", {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] or 'z' }} {{ 'a' if 0 else 'b' }} {{ 'yes' if x }}|{{ 'no' if not x }}", {"x": False}),
    # strings: methods, slicing, unicode
    ("{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|", {"s": "  hello wORLD  "}),
    ("{{ s.split() }} {{ s.split(',') }} {{ s.split(',', 1) }} {{ s.rsplit(',', 1) }} {{ s.split(', ') }}", {"s": "a, b,c ,d"}),
    ("{{ s.startswith('ab') }} {{ s.endswith('yz') }} {{ s.startswith(('x', 'a')) }} {{ s.find('c') }} {{ s.find('q') }} {{ s.count('a') }} {{ s.replace('a', 'A') }} {{ s.replace('a', '', 1) }}", {"s": "abcabcxyz"}),
    ("{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-2:] }} {{ s|length }} {{ s[:0] }}|", {"s": "héllo wörld 🙂"}),
    ("{{ s.strip('xy') }} {{ s.lstrip('x') }} {{ s.rstrip('y') }} {{ '\\n a \\n'.strip('\\n') }}|", {"s": "xxhiyy"}),
    ("{{ s.split('\\n') }} {{ s.splitlines() }} {{ ', '.join(['a', 'b']) }} {{ 'x'.join('abc') }}", {"s": "l1\nl2\n\nl4"}),
    ("{{ '{} and {}'.format('a', 2) }} {{ 'Hi %s, %d items' % ('Bob', 3) }} {{ '%s!' % 'x' }} {{ '%r' % 'q' }}", {}),
    # filters
    ("{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ s|capitalize }}|{{ s|title }}|{{ s|length }}|{{ s|replace('l', 'L') }}", {"s": "  hello wOrld  "}),
    ("{{ l|join(', ') }} {{ l|first }} {{ l|last }} {{ l|length }} {{ l|reverse|list }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ l|unique|list }} {{ l|sum }} {{ l|min }} {{ l|max }}", {"l": [3, 1, 2, 3]}),
    ("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} {{ y|default(5) }}", {"y": 0}),
    ("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 2|float }} {{ -3|abs }} {{ -2.5|abs }}", {}),
    ("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 1.234|round(1, 'ceil') }} {{ 1.299|round(1, 'floor') }}", {}),
    ("{{ d|items|list }} {{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}", {"d": {"a": 1, "b": [2]}}),
    ("{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'é\"\\n<>&'|tojson }} {{ [1.0, none, true, 2]|tojson }} {{ d|tojson(sort_keys=true) }}", {"d": {"z": "ü", "a": {"n": [1, {}], "e": []}}}),
    ("{{ d|tojson(indent=4, separators=(',', ':')) }} {{ 'x'|tojson(ensure_ascii=true) }} {{ 'ü🙂'|tojson(ensure_ascii=true) }}", {"d": {"k": [1, 2]}}),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|map(attribute='role')|join(',') }} {{ msgs|rejectattr('role', 'eq', 'system')|map(attribute='content')|list }}", {"msgs": MSGS}),
    ("{{ [1, 0, 2, none]|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} {{ ['a', 'B']|map('upper')|list }} {{ msgs|selectattr('extra')|list }}", {"msgs": MSGS}),
    ("{{ 'a<b>&\"c\\''|e }} {{ 'x'|safe }} {{ 5|string }} {{ [1]|string }} {{ 'abc'|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ 'one two  three'|wordcount }}", {}),
    ("{{ 'l1\\nl2\\n\\nl4'|indent }}|{{ 'l1\\nl2'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}|", {}),
    ("{{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3]|batch(2, 'x')|list }} {{ 'ab'|center(6) }}|{{ {'a': 1}|attr('a') }}|", {}),
    # tests
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is number }}", {"x": 1}),
    ("{{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is sameas 1 }} {{ 'A' is upper }} {{ x is true }} {{ x is false }}", {"x": True}),
    ("{{ 2 is eq 2 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 'a' is in 'abc' }} {{ y is not defined }} {{ x is not none }}", {"x": 0}),
    # undefined semantics
    ("[{{ y }}][{{ y|length }}][{{ y ~ 'x' }}][{{ y == y }}][{{ y|default('d') }}][{% for i in y %}no{% endfor %}][{{ 'a' in y }}][{{ not y }}]", {}),
    ("[{{ d.missing }}][{{ d['missing'] }}][{{ d.missing is defined }}][{{ l[10] }}][{{ none.x }}]", {"d": {"a": 1}, "l": [1]}),
    # control flow and loops
    ("{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {"l": ["a", "b", "c"]}),
    ("{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{{ ',' if not loop.last }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %} {{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}", {}),
    ("{% for x in l %}{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }} {{ loop.cycle('odd', 'even') }} {{ loop.changed(x) }};{% endfor %}", {"l": [1, 1, 2]}),
    ("{% for row in rows %}{% for c in row %}{{ loop.index }}{{ c }}{% endfor %}|{{ loop.index }};{% endfor %}", {"rows": [["a", "b"], ["c"]]}),
    ("{% for x in d %}{{ x }}{% endfor %} {% for c in 'héj' %}[{{ c }}]{% endfor %} {% for m in msgs[::-1] %}{{ m.role }}{% endfor %} {% for x in l|reverse %}{{ x }}{% endfor %}", {"d": {"b": 1, "a": 2}, "msgs": MSGS, "l": [1, 2]}),
    ("{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}{% if not a %}!{% endif %}", {"a": 0, "b": "", "c": [0]}),
    # set, namespace, scoping
    ("{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}[{{ x }}]{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}),
    ("{% set ns = namespace(count=0, found=none) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.found = loop.index0 %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}", {"msgs": MSGS}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t }}{% set x %}captured {{ a }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}", {}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }}", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %} {% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{{ dict(a=1, b='x') }} {{ dict(a=1)|tojson }} {{ {'a': 1}.a }} {{ {'x': {'y': [10, 20]}}.x.y[1] }} {{ [1, 2, 3][1:] }} {{ [[1, 2]][0][-1] }} {{ l.0 }}", {"l": [7]}),
    # whitespace control, trim_blocks, lstrip_blocks
    ("line1\n  {% if true %}\n    kept\n  {% endif %}\nline2\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n  e {# comment #}\nf\n    {#- stripped -#}\n  g", {}),
    ("<{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}>\n  {%+ if true %}plus{% endif %}\n  {{ 'var keeps indent' }}\n{% if true +%}\nno trim{% endif %}", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}|  {%- raw -%}  x  {%- endraw -%}  |", {}),
    ("text with trailing newline\n\n", {}),
    ("{{ 'multi\nline' }}\r\n{% if true %}\r\ncrlf\r\n{% endif %}\r\ndone", {}),
    ("{{- 'a' }}   \n\n   {{- 'b' -}}   \n\n   {{ 'c' }}", {}),
    ("{% for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content + '</u>\\n' }}\n    {%- endif %}\n{%- endfor %}", {"msgs": MSGS}),
    ("{{ \"double\" 'adjacent' }} {{ '\\x41\\u00e9\\t|' }} {{ 'a\\\\b' }} {{ 0x1F if false else 1_000 }}", {}),
    # generators (select/map/... are lazy in jinja2), number tests, word count
    ("{% if msgs|selectattr('role', 'eq', 'nobody') %}truthy{% endif %} {{ msgs|map(attribute='nope')|list }} {{ (msgs|selectattr('role'))[0] is defined }} {{ (msgs|selectattr('role', 'eq', 'user')|list)[0].content }}", {"msgs": MSGS}),
    ("{{ 2.5 is odd }} {{ -3 is odd }} {{ 4.0 is even }} {{ '' is lower }} {{ 'abc' is lower }} {{ 'A1' is upper }} {{ '1000.0 x_y, é'|wordcount }}", {}),
    # idioms from real chat templates (Llama 3, Mistral, DeepSeek, ...)
    ("{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}[{{ system_message }}]{{ messages|length }}{{ messages[0].role }}", {"messages": MSGS}),
    ("{% set ns = namespace(items=[], is_first=true) %}{% for m in msgs %}{% set ns.items = ns.items + [m.role] %}{% if ns.is_first %}{% set ns.is_first = false %}first:{{ m.role }} {% endif %}{% endfor %}{{ ns.items|join('/') }}", {"msgs": MSGS}),
    ("{% for m in msgs[1:] %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate') }}{% endif %}{{ m.role }}{% endfor %}", {"msgs": MSGS}),
    ("{% for m in msgs %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate') }}{% endif %}{% endfor %}", {"msgs": MSGS}),
    ("{{ {'name': 'f', 'arguments': {'b': 1, 'a': [true, none, 1.25]}}|tojson }} {{ s|tojson }} {{ \"%s-%s\"|format(1, 'a') }}", {"s": "tab\t nul\u0000 ls\u2028 del\x7f quote\" back\\"}),
    ("{% for k, v in d|dictsort %}{{ k }}:{{ v }}{{ ', ' if not loop.last }}{% endfor %}|{% for k in d %}{{ loop.revindex }}{{ k }}{% endfor %}|{{ 'b' in d }}{{ 'z' in d.keys() }}", {"d": {"b": 1, "a": 2, "c": 3}}),
    ("{% set content = m.content if m.content is string else m.content|map(attribute='text')|join('') %}{{ content }}|{{ p.content if p.content is string else p.content|map(attribute='text')|join('+') }}", {"m": {"content": "plain"}, "p": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}),
    ("{%- macro render_args(args) -%}{%- for k, v in args.items() -%}{{ k }}={{ v|tojson if v is not string else v }}{{ ';' if not loop.last }}{%- endfor -%}{%- endmacro -%}<{{ render_args({'city': 'Zürich', 'days': 3, 'opts': {'metric': true}}) }}>", {}),
    ("{{ u.x is defined }}", {}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ undefined_var.attr }}", {}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{{ 1 + 'a' }}", {}),
]


def snippets():
    out = []
    for i, (src, ctx) in enumerate(SNIPPETS):
        case = {"name": f"snippet_{i:02d}", "template": src, "context": ctx}

        def render():
            return ENV.from_string(src).render(**ctx)

        try:
            case["expected"] = render()
        except jinja2.exceptions.TemplateError as e:
            case["error"] = str(e)
        except Exception as e:  # TypeError etc.: the C++ side must fail too
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.environ.get("DFL_SHARED", os.path.join(ROOT, "..", "shared")))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "chat", "template_goldens.json"))
    args = ap.parse_args()
    templates, cases = conversations(args.shared)
    doc = {
        "generator": "tools/ref/make_template_goldens.py",
        "jinja2_version": jinja2.__version__,
        "templates": templates,
        "conversations": cases,
        "snippets": snippets(),
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in cases) + sum("error" in c for c in doc["snippets"])
    print(f"wrote {args.out}: {len(cases)} conversations, {len(doc['snippets'])} snippets "
          f"({n_err} expected errors)")


if __name__ == "__main__":
    main()
