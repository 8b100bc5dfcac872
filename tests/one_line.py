"""The one-line error contract, checked on a finished `invoke` subprocess (shared by the test files
that run the CLI as a user would)."""


def one_line(proc) -> str:
    """Exit 2, exactly one non-empty stderr line naming the fix, no traceback; returns that line."""
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "-> fix:" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]
