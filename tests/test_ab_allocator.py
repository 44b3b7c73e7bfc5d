"""`optbench ab`'s allocator settings (optbench/ab/allocator.py): what both sessions get, what the
caller's own settings do, and that glibc really reuses large buffers under them."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from optbench.ab.allocator import FIXED, choose
from optbench.ab.options import AbOptions, check_options
from optbench.errors import UsageProblem


def test_fixed_sets_both_thresholds_for_both_sessions_on_glibc():
    chosen = choose("fixed", {"PATH": "/bin"}, libc="glibc")
    assert chosen.mode == "fixed" and chosen.added == FIXED == chosen.environment
    assert set(FIXED) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    assert chosen.record() == {"mode": "fixed", "environment": FIXED}
    assert "fixed at 1 GiB" in chosen.describe()


def test_the_callers_own_thresholds_are_kept_and_nothing_is_added():
    mine = {"MALLOC_MMAP_THRESHOLD_": "65536", "PATH": "/bin"}
    chosen = choose("fixed", mine, libc="glibc")
    assert chosen.mode == "user" and chosen.added == {}
    assert chosen.environment == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert "MALLOC_MMAP_THRESHOLD_=65536" in chosen.describe()
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}
    assert choose("fixed", tunables, libc="glibc").mode == "user"


def test_other_malloc_variables_are_recorded_beside_ours():
    chosen = choose("fixed", {"MALLOC_ARENA_MAX": "2"}, libc="glibc")
    assert chosen.added == FIXED and chosen.environment == {"MALLOC_ARENA_MAX": "2", **FIXED}


def test_default_and_other_c_libraries_add_nothing():
    assert choose("default", {}, libc="glibc").added == {}
    assert "adaptive" in choose("default", {}, libc="glibc").describe()
    other = choose("fixed", {}, libc="")
    assert other.mode == "not glibc" and other.added == {}


def test_an_unknown_mode_is_one_line():
    with pytest.raises(UsageProblem, match="--malloc takes one of fixed, default, got 'jemalloc'"):
        check_options(AbOptions(base="HEAD", malloc="jemalloc"))


FAULTS = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 40 << 20  # above glibc's largest adaptive mmap threshold (32 MiB)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    buffer = libc.malloc(size)
    libc.memset(buffer, 1, size)
    libc.free(buffer)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_under_fixed_thresholds_a_freed_large_buffer_is_reused_not_faulted_in_again():
    """The effect the setting exists for, counted in page faults (not timed): with glibc's defaults
    every 40 MiB buffer is mapped and faulted in anew; with the thresholds fixed it is reused."""

    def faults(env: dict[str, str]) -> int:
        done = subprocess.run(
            [sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True
        )
        return int(done.stdout)

    defaults = faults({"PATH": "/usr/bin:/bin"})
    fixed = faults({"PATH": "/usr/bin:/bin", **choose("fixed", {}).added})
    # 20 buffers faulted in against one then reused; a ratio, so huge pages (fewer, larger faults)
    # change nothing.
    assert defaults > 0 and fixed * 5 <= defaults, (defaults, fixed)
