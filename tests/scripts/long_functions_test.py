#!/usr/bin/env python3
"""scripts/long_functions.py on made-up sources: lengths at the limit and one past it, lambdas,
braces in literals and comments, preprocessor lines, members, constructors and operators, and
the statements and initializers that are not functions. Run by CTest (long_functions_script)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import long_functions  # noqa: E402

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def scan(text):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(text)
    try:
        return {name: lines for lines, _, name in long_functions.scan(f.name)}
    finally:
        os.unlink(f.name)


def body(n):
    """A function body of n lines from its opening brace to its closing one."""
    return "{\n" + "  x += 1;\n" * (n - 2) + "}\n"


# Lengths: brace to brace, both counted.
got = scan("int AtLimit(int x) " + body(120) + "int PastLimit(int x) " + body(121))
check("at the limit", got.get("AtLimit"), 120)
check("one past", got.get("PastLimit"), 121)

# A signature over several lines counts from its brace.
got = scan("std::vector<int> Long(int a,\n                        int b) " + body(5))
check("wrapped signature", got, {"Long": 5})

# Lambdas are part of the function holding them; one at namespace scope is no function.
got = scan("void Outer() {\n  auto f = [&](int y) {\n    return y;\n  };\n  f(1);\n}\n"
           "auto kLambda = [](int y) {\n  return y;\n};\n")
check("lambdas", got, {"Outer": 6})

# Braces in strings, raw strings, characters and comments do not count.
got = scan('void Literals() {\n  const char* s = "{{{";\n  const char* r = R"x({ "}" )x";\n'
           "  char c = '{';  // }\n  /* { */\n}\n")
check("literals", got, {"Literals": 6})

# Preprocessor lines are not code.
got = scan("#if defined(X) && (Y)\n#define M(a) { a }\n#endif\nint P() {\n  return 0;\n}\n")
check("preprocessor", got, {"P": 3})

# Members, constructors with initializer lists, operators, qualified names.
got = scan("struct S {\n  int Get() const {\n    return v_;\n  }\n  S& operator=(const S& o) {\n"
           "    v_ = o.v_;\n    return *this;\n  }\n  int v_ = 0;\n};\n"
           "S::S(int v) : v_(v) {\n  Init();\n}\n"
           "namespace a::b {\nint C::D(int x) {\n  if (x) {\n    return 1;\n  }\n"
           "  for (;;) {\n  }\n  return 0;\n}\n}  // namespace a::b\n")
check("members", got, {"Get": 3, "operator=": 4, "S::S": 3, "C::D": 8})

# Statements, initializers and calls with braced arguments are not functions.
got = scan("const int kTable[] = {1, 2, 3};\nstd::vector<int> v{1, 2};\nenum class E { kA };\n"
           "struct T {\n  int a;\n};\nint z = Sum({1, 2});\n")
check("not functions", got, {})

# The command line: --check fails on a long function, passes without one.
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "long.cpp"), "w") as f:
        f.write("int L() " + body(30))
    sys.argv = ["long_functions.py", "--max", "29", "--check", d]
    check("--check over", long_functions.main(), 1)
    sys.argv = ["long_functions.py", "--max", "30", "--check", d]
    check("--check at", long_functions.main(), 0)

for f in failures:
    print("FAIL", f)
print(f"long_functions_test: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
