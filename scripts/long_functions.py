#!/usr/bin/env python3
"""Lists the functions longer than a limit (issue 21: none over 120 lines in src/).

    scripts/long_functions.py [--max N] [--check] [PATH...]   (default: --max 120 src)

A function's length is the lines from its opening brace to its closing one, both counted: what
clang-tidy's readability-function-size calls LineThreshold (.clang-tidy sets the same 120), so
the two agree. This scan needs no compile database and reads the whole tree in a second, where
clang-tidy takes minutes a file; it relies on the tree being clang-formatted. Lambdas count as
part of the function that holds them. --check exits 1 when any function is over the limit.
"""
import argparse
import os
import re
import sys

EXTS = (".cpp", ".cc", ".c", ".h", ".hpp")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "do", "else", "try", "namespace",
                 "class", "struct", "union", "enum", "extern", "return", "case", "default"}


def strip_code(text):
    """Blanks comments, preprocessor lines, string and character literals (raw strings too),
    keeping newlines."""
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  text, flags=re.M)
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or
                                                                         text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2:open_paren]
            end = text.find(")" + delim + '"', open_paren)
            end = n if end < 0 else end + len(delim) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def outside_parens(s):
    depth, out = 0, []
    for c in s:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            out.append(c)
    return "".join(out) if depth == 0 else None


def function_name(header):
    """The name of a function definition's header, or None when it is not one."""
    h = " ".join(header.split())
    if "(" not in h or not re.search(r"\)[^()]*$", h):
        return None
    first = re.match(r"[A-Za-z_]\w*", h)
    if first and first.group(0) in NOT_FUNCTIONS:
        return None
    bare = outside_parens(h)
    if bare is None:
        return None
    if "operator" not in bare and re.search(r"[=\[\],]|\breturn\b", bare.split(":")[0]):
        return None  # a lambda, an initializer, a call in an expression
    m = re.search(r"((?:[\w~]+::)*(?:operator\s*[^\s(]+|[\w~]+))\s*\(", h)
    return m.group(1) if m else None


def scan(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    code = strip_code(text)
    found = []
    depth = 0
    header_start = 0  # offset where the text before the next brace begins
    fn = None  # (name, depth, start offset) of the function being read
    for i, c in enumerate(code):
        if c == "{":
            if fn is None:
                name = function_name(code[header_start:i])
                if name:
                    fn = (name, depth, i)
            depth += 1
            header_start = i + 1
        elif c == "}":
            depth -= 1
            header_start = i + 1
            if fn and depth == fn[1]:
                first = code.count("\n", 0, fn[2]) + 1
                last = code.count("\n", 0, i) + 1
                found.append((last - first + 1, first, fn[0]))
                fn = None
        elif c == ";":
            header_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=120, help="longest allowed (lines)")
    ap.add_argument("--check", action="store_true", help="exit 1 when any is longer")
    ap.add_argument("paths", nargs="*", default=["src"])
    a = ap.parse_args()
    files = []
    for p in a.paths:
        if os.path.isfile(p):
            files.append(p)
        for root, _, names in os.walk(p):
            files += [os.path.join(root, f) for f in names if f.endswith(EXTS)]
    long_ones = []
    for f in sorted(files):
        for lines, line, name in scan(f):
            if lines > a.max:
                long_ones.append((lines, f, line, name))
    for lines, f, line, name in sorted(long_ones, key=lambda x: (-x[0], x[1], x[2])):
        print(f"{lines:5d}  {f}:{line}  {name}")
    print(f"{len(long_ones)} function(s) over {a.max} lines in {len(files)} files", file=sys.stderr)
    return 1 if a.check and long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
