"""Reading a process's open file descriptors and its soft limit from /proc."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from streaming.agent.fds import fd_usage, open_fds, parse_nofile, sized_fd_dirs

LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 524288               files
Max locked memory         8388608              8388608              bytes
"""


def test_the_soft_limit_is_read_from_the_limits_text():
    assert parse_nofile(LIMITS) == 1024
    assert parse_nofile(LIMITS.replace("1024   ", "unlimited")) is None
    assert parse_nofile("Limit Soft Limit\n") is None


@pytest.mark.parametrize("sized", [False, True])
def test_open_descriptors_are_counted_as_they_open_and_close(sized):
    if sized and not sized_fd_dirs("/proc"):
        pytest.skip("this kernel does not give an fd directory's count as its size (< 6.2)")
    before = open_fds("/proc/self/fd", sized)
    assert before is not None
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(25)]
    try:
        assert open_fds("/proc/self/fd", sized) == before + 25
    finally:
        for fd in fds:
            os.close(fd)
    assert open_fds("/proc/self/fd", sized) == before
    assert open_fds("/proc/999999999/fd", sized) is None  # gone


def test_usage_of_another_process_with_its_own_limit():
    """A child lowers its soft limit to 256 and holds 40 extra files open: both read back."""
    code = (
        "import os, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit("
        "resource.RLIMIT_NOFILE)[1]))\n"
        "fds = [os.open('/dev/null', os.O_RDONLY) for _ in range(40)]\n"
        "print(len(os.listdir('/proc/self/fd')) - 1, flush=True)\n"  # the listing's own fd
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        expected = int(child.stdout.readline())
        assert fd_usage(child.pid) == (expected, 256)
        assert expected >= 43  # stdin, stdout, stderr and the 40 files
    finally:
        child.communicate("")
    assert fd_usage(child.pid) is None


def test_an_unlimited_or_unreadable_limit_gives_no_usage(tmp_path):
    pid_dir = tmp_path / "42"
    (pid_dir / "fd").mkdir(parents=True)
    for i in range(3):
        (pid_dir / "fd" / str(i)).symlink_to("/dev/null")
    assert fd_usage(42, str(tmp_path)) is None  # no limits file
    (pid_dir / "limits").write_text(LIMITS.replace("1024   ", "unlimited"))
    assert fd_usage(42, str(tmp_path)) is None
    (pid_dir / "limits").write_text(LIMITS)
    assert fd_usage(42, str(tmp_path)) == (3, 1024)  # counted by listing: not procfs
    assert not sized_fd_dirs(str(tmp_path))


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] == resource.RLIM_INFINITY,
    reason="this process's open-files limit is unlimited",
)
def test_own_usage_matches_the_limit_python_reports():
    usage = fd_usage(os.getpid())
    assert usage is not None and usage[1] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
