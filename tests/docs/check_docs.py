#!/usr/bin/env python3
"""Keeps the docs honest where a machine can tell: every repository path a
doc names exists, every `bulwark COMMAND` is a command of the binary,
every --flag written after `bulwark COMMAND` or `bulwark-train` on one line
of code is a flag that command's --help lists, and every BULWARK_*
environment variable a doc names is read or set somewhere in the code.

usage: check_docs.py REPO_ROOT BIN_DIR
Prints one line per stale reference (file:line: what, and the fix) and
exits 1 when there is any.
"""
import glob
import os
import re
import subprocess
import sys

ROOTS = ("src", "tests", "bench", "docs", "scripts", "config", "python", "proto", "fuzz", ".ci")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./*{},-]*[\w*}])" % "|".join(re.escape(r) for r in ROOTS))
CODE_SPAN_RE = re.compile(r"`([^`]+)`")
# Generated or per-run paths a doc may name that no checkout holds.
GENERATED = ("build", "runs", "data")
ENV_RE = re.compile(r"\b(BULWARK_[A-Z0-9_]*[A-Z0-9])\b")


def code_variables(root):
    """The BULWARK_* names in every file of the code a variable could be
    read or set in: the repository's roots but docs, and the build files."""
    text = []
    for r in ROOTS + ("Makefile", "CMakeLists.txt", "cmake"):
        if r == "docs":
            continue
        top = os.path.join(root, r)
        paths = [top] if os.path.isfile(top) else glob.glob(os.path.join(top, "**", "*"), recursive=True)
        for path in paths:
            if not os.path.isfile(path) or path.endswith(".md"):
                continue
            try:
                with open(path, encoding="utf-8", errors="ignore") as f:
                    text.append(f.read())
            except OSError:
                continue
    return set(ENV_RE.findall("\n".join(text)))


def help_text(binary, *args):
    try:
        r = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=30)
        return r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        return ""


def commands_of(bulwark):
    text = help_text(bulwark)
    section = text.split("Commands:", 1)[1] if "Commands:" in text else ""
    return {m.group(1) for m in re.finditer(r"^\s+([a-z][\w-]*)\s", section, re.M)}


def flags_in(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))


def docs(root):
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(root, "bench", "*", "README.md")))
    return [f for f in files if os.path.exists(f)]


def expand_braces(p):
    """src/x/{a,b}.h -> [src/x/a.h, src/x/b.h]"""
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


def path_exists(root, p):
    p = p.rstrip(".,:;)")
    p = p.split("#", 1)[0]
    # src/trainer/step/train.cc:97 or train.cc:97-99 name lines of a file.
    p = re.sub(r":[\d-]+$", "", p)
    # An upper-case component (fuzz/corpus/NAME) is a placeholder.
    p = "/".join("*" if re.fullmatch(r"[A-Z][A-Z_]*", c) else c for c in p.split("/"))
    return all(glob.glob(os.path.join(root, q)) for q in expand_braces(p))


COMMAND_RE = re.compile(r"^\s*(?:\$\s+)?(?:[A-Z_]+=\S*\s+)*(?:\S*/)?(bulwark(?:-train)?)((?:\s+[^\s|;&#]+)*)")


def commands_in(text):
    """(line number, binary, the words after it) for each command a doc
    shows: a line of a fenced block, or an inline code span, that starts
    with bulwark or bulwark-train. A command whose next line is an error is
    a shown mistake (a typo and its hint), not a reference."""
    fenced = False
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        spans = [line] if fenced else CODE_SPAN_RE.findall(line)
        for span in spans:
            m = COMMAND_RE.match(span)
            if not m:
                continue
            if fenced and n < len(lines) and "error:" in lines[n]:
                continue
            # What follows -- is the job's own command; a diagram's arrows
            # end the command they follow.
            rest = re.split(r"[^\x00-\x7f]", m.group(2).split(" -- ", 1)[0], 1)[0]
            yield n, m.group(1), rest


def check(root, bin_dir):
    bulwark = os.path.join(bin_dir, "bulwark")
    trainer = os.path.join(bin_dir, "bulwark-train")
    commands = commands_of(bulwark)
    if not commands:
        return ["%s --help lists no commands: build it first" % bulwark]
    flags = {}

    def flags_of(binary, *cmd):
        key = (binary,) + cmd
        if key not in flags:
            flags[key] = flags_in(help_text(binary, *cmd))
        return flags[key]

    problems = []
    variables = code_variables(root)
    for doc in docs(root):
        rel = os.path.relpath(doc, root)
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        for n, line in enumerate(text.splitlines(), 1):
            for p in PATH_RE.findall(line):
                if not path_exists(root, p):
                    problems.append("%s:%d: names %s, which is not in the repository: fix the path or drop it" % (rel, n, p))
            for v in sorted(set(ENV_RE.findall(line))):
                if v not in variables:
                    problems.append("%s:%d: names %s, which no code reads or sets: fix the name or drop it" % (rel, n, v))
        for n, binary, rest in commands_in(text):
            words = rest.split()
            if binary == "bulwark-train":
                sub = ("prepare",) if words[:1] == ["prepare"] else ()
                for f in sorted(flags_in(rest) - flags_of(trainer, *sub) - {"--help"}):
                    problems.append("%s:%d: bulwark-train %shas no flag %s ('bulwark-train %s--help' lists them)" %
                                    (rel, n, " ".join(sub) + " " if sub else "", f, " ".join(sub) + " " if sub else ""))
                continue
            if not words or words[0].startswith("-"):
                continue
            cmd = words[0]
            # help is CLI11's; an upper-case word is a placeholder; anything
            # but a word is a program's output that starts with its name.
            if cmd == "help" or not re.fullmatch(r"[a-z][a-z-]*", cmd):
                continue
            if cmd not in commands:
                problems.append("%s:%d: 'bulwark %s' is no command of bulwark (bulwark --help lists them)" % (rel, n, cmd))
                continue
            sub = (cmd, "return") if cmd == "machine" and words[1:2] == ["return"] else (cmd,)
            for f in sorted(flags_in(rest) - flags_of(bulwark, *sub) - {"--help"}):
                problems.append("%s:%d: 'bulwark %s' has no flag %s ('bulwark %s --help' lists them)" %
                                (rel, n, " ".join(sub), f, " ".join(sub)))
    return problems


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    problems = check(sys.argv[1], sys.argv[2])
    for p in problems:
        print(p)
    print("check_docs: %d stale reference(s) in %d doc(s)" % (len(problems), len(docs(sys.argv[1]))))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
