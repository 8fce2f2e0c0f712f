"""What the Python tests share about a kvtier process they start: its startup banner."""
import re
import time


def read_banner(process, timeout_s=20):
    """The banner `process` prints up to "Stop with Ctrl-C", and its values by label.

    Returns (banner, values): values maps each "  label  value" line's label ("rpc",
    "metrics") to its first word. The banner ends early if the process closes its output.
    """
    banner = ""
    deadline = time.monotonic() + timeout_s
    while "Stop with Ctrl-C" not in banner and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        banner += line
    values = {m.group(1): m.group(2) for m in re.finditer(r"^  (\w[\w ]*?) {2,}(\S+)", banner, re.MULTILINE)}
    return banner, values
