#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/corpus.jsonl: the tokenizer test corpus.

One JSON object a line: {"name", "text"} or, for invalid UTF-8 input, {"name", "bytes_b64"}
(the expected text for those is the bytes decoded with errors="replace", which is what Rust's
String::from_utf8_lossy and so the `tokenizers` library's callers produce).
Deterministic: standard library only, no randomness beyond a fixed LCG.
Run: python3 scripts/golden/make_corpus.py [--out tests/golden/tokenizer/corpus.jsonl]
"""
import argparse
import base64
import json
import os


def long_text(min_bytes=24 * 1024):
    """A deterministic ≥ 24 KB mixed-script text (English, CJK, digits, code, whitespace)."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "model", "token",
             "DeepSeek", "edge", "runtime", "Vulkan", "matrix", "attention", "latent", "expert",
             "2024", "3.14159", "1234567890123", "naïve", "café", "über", "日本語", "中文字符",
             "한국어", "العربية", "हिन्दी", "😀", "👨‍👩‍👧‍👦", "don't", "I'LL", "x+=1;", "\t", "  ",
             "\n", "\r\n", "e\u0301", "<|im_start|>", "<think>", "ﬁ", "Ｆｕｌｌ", "…", "—"]
    state = 12345
    out = []
    size = 0
    while size < min_bytes:
        state = (state * 1103515245 + 12345) % (1 << 31)
        w = words[state % len(words)]
        state = (state * 1103515245 + 12345) % (1 << 31)
        sep = " " if state % 7 else ""
        out.append(w + sep)
        size += len((w + sep).encode("utf-8"))
    return "".join(out)


def cases():
    c = []

    def t(name, text):
        c.append({"name": name, "text": text})

    def b(name, data):
        c.append({"name": name, "bytes_b64": base64.b64encode(data).decode("ascii")})

    # English prose and contractions (the (?i:'s|'t|'re|'ve|'m|'ll|'d) groups).
    t("en_prose", "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, "
      "and the clocks were striking thirteen.")
    t("en_contractions", "I'm sure you're right: don't, can't, won't, it's, we've, they'd, she'll.")
    t("en_contractions_upper", "I'M SURE YOU'RE RIGHT: DON'T, CAN'T, IT'S, WE'VE, THEY'D, SHE'LL.")
    t("en_curly_apostrophe", "It’s “quoted” — with an ellipsis… and ‘single’ quotes.")
    t("en_punct_runs", "Wait...what?!?! No way!!! (really) [yes] {ok} <tag> #hash @user $5 %20 ^_^ ~~~")
    t("en_single_char", "a")
    t("en_single_word_cap", "Hello")
    t("en_long_word", "Supercalifragilisticexpialidocious antidisestablishmentarianism "
      "pneumonoultramicroscopicsilicovolcanoconiosis")
    t("en_repeated_char", "a" * 100)
    t("en_repeated_excl", "!" * 64)
    t("en_url_email", "Visit https://example.com/path?q=1&r=two#frag or mail someone@example.org.")
    t("en_markdown", "# Title\n\n- item *one*\n- item **two**\n\n```\ncode\n```\n> quote")
    # CJK and other scripts.
    t("zh_simplified", "深度求索是一家人工智能公司。我们今天学习大语言模型的推理。")
    t("zh_traditional", "這是一個繁體中文的句子，包含標點符號！")
    t("ja_mixed", "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。ｶﾀｶﾅ半角")
    t("ko_hangul", "안녕하세요. 한국어 문장을 토큰화합니다.")
    t("ko_hangul_nfd", "\u1112\u1161\u11ab\u1100\u1173\u11af")  # 한글 as conjoining jamo
    t("ar_prose", "مرحبا بالعالم. هذه جملة باللغة العربية مع أرقام ١٢٣٤٥.")
    t("hi_prose", "नमस्ते दुनिया। यह हिन्दी का एक वाक्य है, अंक १२३ के साथ।")
    t("th_no_spaces", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ")
    t("ru_prose", "Съешь же ещё этих мягких французских булок, да выпей чаю.")
    t("el_prose", "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.")
    t("he_prose", "שלום עולם, זה משפט בעברית.")
    t("mixed_scripts", "Hello世界123مرحبا नमस्ते😀abc")
    # Code.
    t("code_python", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n"
      "class A:\n\tdef f(self):\n\t\treturn {'k': [1, 2, 3]}\n")
    t("code_cpp", "#include <vector>\ntemplate <typename T>\nstd::vector<T> f(const T& x) {\n"
      "  if (x != T{}) {\n    return {x, x};\n  }\n  return {};  // empty\n}\n")
    t("code_json", "{\"name\": \"edgeseek\", \"ids\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}")
    t("code_html", "<div class=\"x\">&amp; &lt;p&gt; text</div>")
    t("code_deep_indent", "                if (a) {\n                        b();\n                }\n")
    # Numbers.
    t("num_long_run", "1234567890123")
    t("num_very_long", "3141592653589793238462643383279502884197169399375105820974944")
    t("num_separators", "1,234,567.89 and 1.234.567,89 and 1 000 000 and 1_000_000")
    t("num_mixed", "v1.2.3 at 12:30 on 2024-01-15, pi=3.14159, e=2.71828e0, -42, +7, 0x1F, 1e-10")
    t("num_digits_and_letters", "abc123def4567ghi89012")
    t("num_arabic_indic", "٠١٢٣٤٥٦٧٨٩")
    t("num_devanagari", "०१२३४५६७८९")
    t("num_fullwidth", "０１２３４５６７８９")
    t("currency", "€100, ¥2000, £3.50, $1,000,000, ₹500, ₿0.001")
    # Emoji.
    t("emoji_simple", "I love it 😀😃😄 🎉")
    t("emoji_skin_tone", "👍🏽 👋🏿 🧑🏻‍💻")
    t("emoji_zwj_family", "👨‍👩‍👧‍👦 family and 👩‍❤️‍💋‍👨 kiss")
    t("emoji_flags_keycaps", "🇯🇵🇺🇸🏳️‍🌈 1️⃣ #️⃣")
    # Combining marks and normalization-sensitive text.
    t("combining_e_acute", "cafe\u0301 vs caf\u00e9")
    t("combining_zalgo", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324a"
      "\u0360\u0344l\u0352\u0366g\u0315o\u0336")
    t("compat_ligature_fullwidth", "ﬁnance ﬂow Ａｂｃ ＡＢＣ ｶﾞ ①②③ ㎏ ™")
    t("math_symbols", "∑ᵢ xᵢ² ≤ ∫₀^∞ e^{-x} dx, √2 ≈ 1.414, α→β ⇒ γ")
    t("sentencepiece_marker_in_text", "▁hello▁world ▁▁")
    # Whitespace.
    t("ws_double_space", "a  b")
    t("ws_many_spaces", "a" + " " * 17 + "b")
    t("ws_only_spaces", "     ")
    t("ws_single_space", " ")
    t("ws_tabs", "\tone\t\ttwo\t\t\tthree")
    t("ws_newlines", "line1\nline2\n\nline4\n\n\n")
    t("ws_only_newlines", "\n\n\n\n")
    t("ws_crlf", "line1\r\nline2\r\n\r\nline4")
    t("ws_lone_cr", "one\rtwo\r\rthree")
    t("ws_leading", "   leading spaces")
    t("ws_trailing", "trailing spaces   ")
    t("ws_leading_newline", "\nstarts with newline")
    t("ws_mixed", " \t \n \r\n\t x \t ")
    t("ws_unicode_spaces", "nbsp\u00a0here, ideographic\u3000space, thin\u2009space, em\u2003space")
    t("ws_zero_width", "zero\u200bwidth\u200cjoiner\u200d and \ufeffBOM")
    t("control_chars", "nul\u0000soh\u0001bel\u0007del\u007f")
    # Special tokens written inside text (matched as added tokens before normalization).
    t("special_chatml", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")
    t("special_deepseek_bos", "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>")
    t("special_deepseek_roles", "<｜User｜>What is 2+2?<｜Assistant｜><think>\nsimple\n</think>4")
    t("special_llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>")
    t("special_think", "<think>\nLet me reason.\n</think>\n\nThe answer.")
    t("special_endoftext", "text<|endoftext|>more")
    t("special_adjacent", "<|im_start|><|im_start|><|im_end|><|im_end|>")
    t("special_with_spaces", " <|im_end|> <|eot_id|> <｜end▁of▁sentence｜> ")
    t("special_partial", "<|im_start <|im_end| <｜begin▁of▁sentence <think")
    t("special_tool_tokens", "<tool_call>\n{\"name\": \"f\"}\n</tool_call><｜tool▁calls▁begin｜>")
    t("special_fim", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>")
    # Empty and very long.
    t("empty", "")
    t("long_mixed_24k", long_text())
    # Invalid UTF-8.
    b("invalid_lone_continuation", b"abc\x80def")
    b("invalid_ff_fe", b"\xff\xfehello")
    b("invalid_truncated_3byte", b"end \xe4\xb8")
    b("invalid_overlong", b"slash \xc0\xaf here")
    b("invalid_surrogate", b"sur \xed\xa0\x80 rogate")
    b("invalid_latin1", b"h\xe9llo w\xf6rld")
    b("invalid_mixed_valid", "日本".encode("utf-8") + b"\xe6\x97" + "語".encode("utf-8"))
    return c


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "golden", "tokenizer",
                                                   "corpus.jsonl"))
    args = ap.parse_args()
    cs = cases()
    names = [x["name"] for x in cs]
    assert len(names) == len(set(names)), "duplicate case names"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for x in cs:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    print(f"wrote {len(cs)} cases to {args.out}")


if __name__ == "__main__":
    main()
