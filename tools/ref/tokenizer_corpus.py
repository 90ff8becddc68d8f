"""Deterministic tokenizer test corpus (no network, fixed seed).

build_corpus() returns a list of >= 2,000 strings covering the cases where tokenizers tend to
differ: scripts (Latin, CJK, Arabic, Hebrew, Devanagari, Thai, Cyrillic, Greek), emoji with ZWJ /
skin tones / flags / keycaps, code, whitespace runs (tabs, newlines, CRLF, Unicode spaces), digits
and long numbers, special-token strings of Qwen3 and Gemma 3 (whole, partial, nested), English
contractions, combining characters and NFD input (so NFC matters), and random Unicode.
Random code points are drawn from those already assigned in Unicode 3.2, so the corpus does not
depend on which Unicode version the regex / normalization libraries were built with.
"""
import random
import unicodedata

SEED = 20240611

WORDS = ("the quick brown fox jumps over lazy dog time people year way day man thing woman life "
         "child world school state family student group country problem hand part place case week "
         "company system program question work government number night point home water room mother "
         "area money story fact month lot right study book eye job word business issue side kind head "
         "house service friend father power hour game line end member law car city community name "
         "president team minute idea kid body information back parent face others level office door "
         "health person art war history party result change morning reason research girl guy moment "
         "air teacher force education tokenizer speculative decoding inference attention transformer "
         "don't can't won't it's I'm you're we've they'll she'd HE'S IT'LL I'VE").split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
                "'D", "'ſ", "’s", "'x"]

CJK = ["我爱自然语言处理。", "今天天气很好，我们去公园散步吧！", "東京は日本の首都です。",
       "ひらがなとカタカナと漢字", "これはテストです、よろしくお願いします。", "한국어 문장을 토큰화합니다.",
       "안녕하세요 세계", "中文English混合mixed文本", "机器学习和深度学习的区别是什么？",
       "「引用」『二重引用』【括弧】", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３", "繁體中文與简体中文",
       "𠀀𠀁𪚥𰻞 rare ideographs", "ｶﾀｶﾅ half-width katakana"]

OTHER_SCRIPTS = ["مرحبا بالعالم، كيف حالك؟", "اللغة العربية جميلة جداً ١٢٣٤٥", "שלום עולם, מה שלומך?",
                 "नमस्ते दुनिया, आप कैसे हैं?", "हिन्दी में लिखा गया वाक्य १२३", "สวัสดีครับ ยินดีที่ได้รู้จัก",
                 "Привет, мир! Как дела?", "Ελληνικά: Γειά σου Κόσμε", "Ἀρχὴ σοφίας φόβος Κυρίου",
                 "ქართული ენა", "Հայերեն լեզու", "ᚠᚢᚦᚨᚱᚲ runes", "தமிழ் மொழி", "বাংলা ভাষা",
                 "ಕನ್ನಡ ತೆಲುగు മലയാളം", "Tiếng Việt có dấu đầy đủ", "Türkçe ğüşıöç İstanbul",
                 "Ʀǝɐlly wǝıɹd lǝʇʇǝɹs", "ﷺ ﷽ ligatures"]

EMOJI = ["😀", "😂", "🤖", "🚀", "❤️", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "🇩🇪🇫🇷",
         "1️⃣", "#️⃣", "🧑🏿‍🚀", "✌🏻", "🫠", "☕", "⚡️", "🏴‍☠️", "👁️‍🗨️", "🤷‍♀️", "🧔🏼‍♂️", "💯", "🔥🔥🔥"]

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|vision_start|>", "<start_of_turn>", "<end_of_turn>",
            "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_image>", "<image_soft_token>",
            "<unused0>", "<unused42>", "<0x41>", "<0x0A>", "<table>", "</td>", "<b>", "<s>", "</s>",
            "[multimodal]", "▁▁", "▁▁▁▁", "<|im_start", "im_end|>", "<|", "|>", "<<|im_end|>>",
            "<start_of_turn><end_of_turn>", "<|im_start|><|im_start|>"]

CODE = [
    "def f(x):\n    return x ** 2 + 1\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    "const x = await fetch(`https://example.com/api?id=${id}&q=hello%20world`);",
    "{\"name\": \"dflash\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"cpp\"]}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html><body><div class=\"x\"><table><tr><td>1</td></tr></table></div></body></html>",
    "    if self.cache is not None:\n        return self.cache[key]\n\n\n",
    "x = [i for i in range(100) if i % 3 == 0]  # list comprehension",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }",
    "$ git commit -m 'fix: handle \\r\\n line endings' && git push origin main",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "regex: ^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@example\\.com$",
]

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\t \t", "\u00a0",
              "\u3000", "\u2009", "\u2003", "\u180e", "\u0085", "\u200b", "\u2028", "\u202f", "\ufeff",
              "\x0b", "\x0c", "\x1c", " " * 17, "\n" * 5, "\t" * 9, " \t\n\r " * 3]

COMBINING = ["e\u0301", "a\u0300\u0320", "A\u030a", "\u212b", "o\u0308\u0304", "n\u0303", "\u1100\u1161\u11a8",
             "ǅ", "ﬁ", "Ω", "\u2126", "\u0041\u0301\u0302", "q\u0307\u0323", "\u0958", "\u0915\u093c",
             "\u05d0\u05b7", "ṩ", "s\u0323\u0307", "\u1e9b\u0323", "Å", "é", "ñ", "\u0338", "\u20dd",
             "\u0301", "\u0301\u0301\u0301"]


def _assigned_pool(rng):
    """Code points assigned in Unicode 3.2, excluding surrogates and controls."""
    ranges = [(0x20, 0x2FF), (0x300, 0x36F), (0x370, 0x1FFF), (0x2000, 0x2BFF), (0x2E80, 0x9FFF),
              (0xA000, 0xD7A3), (0xE000, 0xE0FF), (0xF900, 0xFFFD), (0x10000, 0x1D7FF),
              (0x20000, 0x2A6D6), (0xE0001, 0xE007F)]
    pool = []
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            cat = unicodedata.ucd_3_2_0.category(c)
            if cat not in ("Cn", "Cs", "Cc"):
                pool.append(c)
    return pool


def _sentence(rng, n_words):
    words = [rng.choice(WORDS) for _ in range(n_words)]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    s = " ".join(words)
    return s + rng.choice([".", "!", "?", "", ",", "...", ";"])


def _number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 30)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 9)}f}"
    if kind == 2:
        return f"+1 ({rng.randrange(100, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}"
    if kind == 3:
        return f"{rng.randrange(1, 10**6):,}"
    if kind == 4:
        return f"{rng.random():.3e}"
    return "".join(rng.choice("0123456789") for _ in range(rng.randrange(30, 120)))


def build_corpus():
    rng = random.Random(SEED)
    pool = _assigned_pool(rng)
    lines = ["", " ", "a", "\n", "hello", "Hello world", "hello world!", "  leading", "trailing  ",
             "The year 2024 had 366 days.", "I'm sure you've seen it; they'll know, she'd say. It's fine."]
    lines += SPECIALS + CJK + OTHER_SCRIPTS + EMOJI + CODE + WHITESPACE + COMBINING

    def mixed(rng, n):
        parts = []
        for _ in range(n):
            k = rng.randrange(12)
            if k < 3:
                parts.append(_sentence(rng, rng.randrange(1, 8)))
            elif k == 3:
                parts.append(rng.choice(CJK))
            elif k == 4:
                parts.append(rng.choice(OTHER_SCRIPTS))
            elif k == 5:
                parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randrange(1, 4))))
            elif k == 6:
                parts.append(rng.choice(SPECIALS))
            elif k == 7:
                parts.append(rng.choice(WHITESPACE))
            elif k == 8:
                parts.append(_number(rng))
            elif k == 9:
                parts.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS))
            elif k == 10:
                parts.append(rng.choice(COMBINING) + rng.choice(WORDS))
            else:
                parts.append(rng.choice(CODE)[: rng.randrange(5, 60)])
        sep = rng.choice(["", " ", " ", " ", "\n", "\t", "  "])
        return sep.join(parts)

    for _ in range(500):
        lines.append(_sentence(rng, rng.randrange(1, 30)))
    for _ in range(200):
        lines.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS) + " " + _sentence(rng, 3))
    for _ in range(500):
        lines.append(mixed(rng, rng.randrange(1, 8)))
    for _ in range(150):
        lines.append(_number(rng) + rng.choice(["", " ", "x", "-", "."]) + _number(rng))
    for _ in range(150):  # whitespace-heavy
        lines.append("".join(rng.choice(WHITESPACE + ["x", "ab", "中", "é", "!"]) for _ in range(rng.randrange(2, 25))))
    for _ in range(150):  # NFD / combining sequences
        base = rng.choice(WORDS)
        lines.append(unicodedata.normalize("NFD", rng.choice(["Café", "naïve", "Ångström", "résumé", "über",
                                                              "Pokémon", "façade", "Hàng Việt", "한국어"]))
                     + " " + base + rng.choice(COMBINING) * rng.randrange(1, 3))
    for _ in range(250):  # random Unicode
        lines.append("".join(rng.choice(pool) for _ in range(rng.randrange(1, 40))))
    for _ in range(100):  # random printable ASCII incl. punctuation runs
        lines.append("".join(rng.choice("abcXYZ019 '\"!?.,;:-_()[]{}<>|/\\@#$%^&*+=~`\t\n")
                             for _ in range(rng.randrange(1, 80))))
    for _ in range(60):  # special-token soup
        lines.append("".join(rng.choice(SPECIALS + [" ", "\n", "x", "\n\n", "\t"]) for _ in range(rng.randrange(2, 12))))
    for _ in range(10):  # long lines (performance, long BPE words for Gemma)
        lines.append(mixed(rng, 60))
    lines.append("a" * 3000)
    lines.append(" " * 1000 + "x")
    lines.append("\n" * 300)
    lines.append("😀" * 200)
    lines.append(("supercalifragilisticexpialidocious" * 40))
    return lines


if __name__ == "__main__":
    c = build_corpus()
    print(len(c), sum(len(s) for s in c))
