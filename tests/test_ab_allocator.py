"""`optbench ab`'s allocator settings (optbench/ab/allocator.py): what both sessions get, what the
caller's own settings do, and that glibc really reuses large buffers under them."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from optbench.ab.allocator import FIXED_BYTES, NAMES, OLD_GLIBC_BYTES, choose, fixed_bytes, user_settings
from optbench.ab.options import AbOptions, check_options
from optbench.errors import UsageProblem
from optbench.matrix.checks import check_malloc

GLIBC = ("glibc", "2.36")


def test_fixed_sets_both_thresholds_for_both_sessions_on_glibc():
    chosen = choose("fixed", {"PATH": "/bin"}, libc=GLIBC)
    expected = dict.fromkeys(NAMES, str(FIXED_BYTES))
    assert chosen.mode == "fixed" and chosen.added == expected == chosen.environment
    assert set(NAMES) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    assert chosen.record() == {"mode": "fixed", "environment": expected}
    assert "fixed at 1 GiB" in chosen.describe()


def test_a_glibc_before_2_35_gets_the_largest_threshold_it_accepts():
    """Older glibc ignores an mmap threshold above 32 MiB silently, and the trim threshold alone would
    then pin it at 128 KiB: the slow regime for every buffer."""
    assert fixed_bytes("2.35") == fixed_bytes("2.41") == FIXED_BYTES
    assert fixed_bytes("2.31") == fixed_bytes("2.34") == fixed_bytes("") == OLD_GLIBC_BYTES == 32 << 20
    old = choose("fixed", {}, libc=("glibc", "2.28"))
    assert old.added == dict.fromkeys(NAMES, str(32 << 20)) and "fixed at 32 MiB" in old.describe()


def test_the_callers_own_thresholds_are_kept_and_nothing_is_added():
    mine = {"MALLOC_MMAP_THRESHOLD_": "65536", "PATH": "/bin"}
    chosen = choose("fixed", mine, libc=GLIBC)
    assert chosen.mode == "user" and chosen.added == {}
    assert chosen.environment == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert "MALLOC_MMAP_THRESHOLD_=65536" in chosen.describe()
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}
    assert choose("fixed", tunables, libc=GLIBC).mode == "user"


def test_a_preloaded_allocator_is_kept_and_named():
    preload = {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}
    chosen = choose("fixed", preload, libc=GLIBC)
    assert chosen.mode == "preloaded" and chosen.added == {} and chosen.environment == preload
    assert "libjemalloc" in chosen.describe()


def test_other_malloc_variables_are_recorded_beside_ours():
    chosen = choose("fixed", {"MALLOC_ARENA_MAX": "2"}, libc=GLIBC)
    assert chosen.added == dict.fromkeys(NAMES, str(FIXED_BYTES))
    assert chosen.environment == {"MALLOC_ARENA_MAX": "2", **chosen.added}


def test_default_and_other_c_libraries_add_nothing():
    assert choose("inherit", {}, libc=GLIBC).added == {}
    assert "adaptive" in choose("inherit", {}, libc=GLIBC).describe()
    other = choose("fixed", {"MALLOC_ARENA_MAX": "2"}, libc=("", ""))
    assert other.mode == "not glibc" and other.added == {} and "not glibc" in other.describe()


def test_an_unknown_mode_is_one_line():
    with pytest.raises(UsageProblem, match="--malloc takes one of fixed, inherit, got 'jemalloc'"):
        check_options(AbOptions(base="HEAD", malloc="jemalloc"))


FAULTS = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 24 << 20  # below every threshold ab sets, above glibc's default one (128 KiB)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    buffer = libc.malloc(size)
    libc.memset(buffer, 1, size)
    libc.free(buffer)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_under_the_fixed_thresholds_a_freed_large_buffer_is_reused_not_faulted_in_again():
    """The effect the setting exists for, counted in page faults (not timed): with glibc's thresholds
    pinned low (the trim threshold alone does that) every 24 MiB buffer is mapped and faulted in
    anew; with ab's it is faulted in once and reused. On this glibc's own version."""
    clean = {k: v for k, v in os.environ.items() if k not in user_settings(os.environ)}

    def faults(extra: dict[str, str]) -> int:
        done = subprocess.run(
            [sys.executable, "-c", FAULTS], env={**clean, **extra}, capture_output=True, text=True, check=True
        )
        return int(done.stdout)

    pinned = faults({"MALLOC_TRIM_THRESHOLD_": str(128 << 10), "MALLOC_MMAP_THRESHOLD_": str(128 << 10)})
    fixed = faults(choose("fixed", {}).added)
    # 20 buffers faulted in against one, then reused; a ratio, so huge pages (fewer, larger faults)
    # change nothing.
    assert pinned > 0 and fixed * 5 <= pinned, (pinned, fixed)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_pytest_bench_malloc_fixed_fixes_them_in_its_own_process():
    """`--malloc fixed` (optbench.catalog.allocator.fix_thresholds, called before any model is built)
    has the same effect in-process as ab's environment has at start-up."""
    clean = {k: v for k, v in os.environ.items() if k not in user_settings(os.environ)}
    low = {"MALLOC_TRIM_THRESHOLD_": str(128 << 10), "MALLOC_MMAP_THRESHOLD_": str(128 << 10)}
    fix = "from optbench.catalog.allocator import fix_thresholds; fix_thresholds()\n"

    def faults(code: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", code], env={**clean, **low}, capture_output=True, text=True, check=True
        )
        return int(done.stdout)

    pinned, fixed = faults(FAULTS), faults(fix + FAULTS)  # the same low start, then fixed or not
    assert pinned > 0 and fixed * 5 <= pinned, (pinned, fixed)


def test_malloc_fixed_is_refused_in_one_line_where_it_cannot_apply(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    with pytest.raises(
        UsageProblem, match=r"^--malloc fixed cannot be applied here: LD_PRELOAD=.*libjemalloc"
    ):
        check_malloc("--malloc", "fixed")
    check_malloc("--malloc", "inherit")  # inheriting is always possible


def test_malloc_auto_fixes_glibcs_own_thresholds_and_leaves_every_other_choice_alone():
    from optbench.catalog.allocator import auto_choice

    assert auto_choice({}, False, libc="glibc", glibc_malloc=True)[0] == "fixed"
    jemalloc = {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}
    for environ, libc, in_ab, why in (
        ({}, "glibc", True, "optbench ab chose"),  # ab's sessions run the allocator ab gave them
        ({"MALLOC_MMAP_THRESHOLD_": "65536"}, "glibc", False, "environment sets"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, "glibc", False, "environment sets"),
        (jemalloc, "glibc", False, "libjemalloc.so.2 replaces glibc's malloc"),
        ({}, "musl", False, "the C library is musl"),
    ):
        mode, reason = auto_choice(environ, in_ab, libc=libc, glibc_malloc=True)
        assert mode == "inherit" and why in reason, (environ, libc, reason)
    check_malloc("--malloc", "auto")  # never refused: it falls back to inherit


_SHIM = """
#include <stddef.h>
extern void *__libc_malloc(size_t); extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t); extern void *__libc_realloc(void *, size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is looked for")
def test_malloc_auto_leaves_an_allocator_preloaded_under_any_name_alone(tmp_path):
    """An interposed malloc under a name optbench does not know (PRELOADED) is seen from the symbol
    the process resolves, not from LD_PRELOAD's text."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a malloc shim with")
    (tmp_path / "shim.c").write_text(_SHIM)
    shim = tmp_path / "libplainname.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "shim.c")], check=True)
    probe = (
        "import os; from optbench.catalog.allocator import auto_choice, malloc_is_glibcs; "
        "print(malloc_is_glibcs(), *auto_choice(os.environ, False), sep='|')"
    )
    # without any allocator setting of the caller's (MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD)
    env = {k: v for k, v in os.environ.items() if k not in user_settings(os.environ)}
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert plain.stdout.split("|")[:2] == ["True", "fixed"], plain.stdout
    shimmed = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "LD_PRELOAD": str(shim)},
        capture_output=True,
        text=True,
        check=True,
    )
    glibcs, mode, why = shimmed.stdout.strip().split("|")
    assert (glibcs, mode) == ("False", "inherit") and "malloc is not glibc's" in why, shimmed.stdout


def test_malloc_auto_falls_back_to_inherit_where_glibc_refuses_and_fixed_is_refused(monkeypatch, capsys):
    import optbench.catalog.allocator as allocator
    from optbench.pytest_plugin.hooks import _apply_malloc

    class Plugins:
        def get_plugin(self, name):
            return None

    class Config:
        pluginmanager = Plugins()

    def refuse():
        raise RuntimeError("glibc 2.36 refused mallopt(-3, 1073741824)")

    monkeypatch.setattr(allocator, "fix_thresholds", refuse)
    monkeypatch.setattr(allocator, "auto_choice", lambda environ, in_ab: ("fixed", "glibc's own"))
    assert _apply_malloc(Config(), "auto") == "inherit"
    assert "malloc left as the process started it: glibc 2.36 refused" in capsys.readouterr().err
    with pytest.raises(pytest.UsageError, match="^--malloc fixed: glibc 2.36 refused"):
        _apply_malloc(Config(), "fixed")
    assert _apply_malloc(Config(), "inherit") == "inherit"
