"""Scope globs, matched by hand (loopx.kernel.read.scope: no `re` on the paths of `next` and
`turn finish`), mean what their documented translation to a regular expression means.

The translation below is the definition (docs/cli.md's scope globs: ``**`` any number of
directories, ``*`` and ``?`` within one segment); the matcher must agree with it on any glob and
any path, odd characters and line breaks included."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopx.kernel.read import scope


def oracle(glob: str, rel: str) -> bool:
    """The regular expression a glob stands for, matched in full."""
    g = glob.strip()
    g = g[2:] if g.startswith("./") else g
    g = g + "**" if g.endswith("/") else g
    out, i = [], 0
    while i < len(g):
        if g.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif g.startswith("**", i):
            out.append(".*")
            i += 2
        elif g[i] == "*":
            out.append("[^/]*")
            i += 1
        elif g[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(g[i]))
            i += 1
    if re.match("".join(out) + r"\Z", rel):
        return True
    if not any(c in glob for c in "*?"):
        return rel.startswith(glob.strip().removeprefix("./").rstrip("/") + "/")
    return False


GLOB_PARTS = st.sampled_from(["**/", "**", "*", "?", "/", "a", "b", ".", "src", "é", "\n", " ", "./", "[", "\\"])
PATH_PARTS = st.sampled_from(["a", "b", "/", ".", "src", "ab", "é", "\n", " ", "[", "\\", "x.py"])


@settings(max_examples=1500, deadline=None)
@given(st.lists(GLOB_PARTS, max_size=8).map("".join), st.lists(PATH_PARTS, max_size=10).map("".join))
@example("src/**", "src/a/b.py")
@example("src/**/*.py", "src/x.py")
@example("**/test_*.py", "tests/unit/test_a.py")
@example("docs/", "docs/a/b.md")
@example("docs", "docs/a.md")
@example("**", "a\nb")
@example("**/b", "a\n/b")
@example("*", "a\nb")
@example("a?c", "a/c")
def test_the_hand_matcher_agrees_with_the_regular_expression(glob, rel):
    assert scope.matches(glob, rel) == oracle(glob, rel)


def test_many_stars_against_a_long_path_stay_fast():
    # positions, not backtracking: 12 stars over 60 characters would otherwise take on the order of
    # 60**12 steps, and 20 `**` over 4,000 characters (a regular expression's time) minutes
    assert not scope.matches("*a" * 12 + "b", "a" * 60)
    assert not scope.matches("**/" * 10 + "z", "a/" * 40 + "y")
    assert not scope.matches("**" * 20 + "x", "a" * 4000)
    assert not scope.matches("**/" * 20 + "x", "a/" * 2000 + "b")


def test_a_glob_of_hundreds_of_wildcards_decides_and_never_raises():
    # a scope may hold any glob of up to 1,000 characters; one wildcard per recursion level used to
    # raise RecursionError here, and the pre-tool hook, which must deny what it cannot decide,
    # let the write through
    deep = "src/" + "*/" * 480 + "*"
    path = "src/" + "a/" * 480 + "f"
    assert scope.matches(deep, path) and not scope.matches(deep, path + "/g")
    assert scope.check({"allow": ["src/**"], "deny": [deep]}, path) == {"inside": False, "reason": f"denied by {deep}"}
    assert scope.matches("**/" * 340 + "x", "a/x")


def test_check_names_the_glob_that_decided():
    sc = {"allow": ["src/**", "tests/"], "deny": ["src/secret*"]}
    assert scope.check(sc, "src/a/b.py") == {"inside": True, "reason": "allowed by src/**"}
    assert scope.check(sc, "src/secret.txt") == {"inside": False, "reason": "denied by src/secret*"}
    assert scope.check(sc, "tests/x/y.py")["inside"]
    assert scope.check(sc, "README.md") == {"inside": False, "reason": "matches no allowed glob"}
    assert scope.check(sc, ".loopx/events.jsonl")["inside"] is False
    assert scope.check(sc, "../elsewhere")["inside"] is False
