"""A `kvtier up` process that a Python test starts and stops: a scratch directory with the
test's token file, loopback ports chosen by the process, its log kept for failures."""
import os
import signal
import subprocess
import tempfile

from kvtier_banner import read_banner


class KvtierUp:
    """`kvtier up` with `token_file_text` as its token file. `args(directory)` gives the
    extra flags (files a test writes there beforehand included). Raises RuntimeError, with
    the banner and the log, when the banner lacks `ready_label`."""

    def __init__(self, binary, token_file_text, prefix, args=lambda directory: [], ready_label="rpc"):
        self.dir = tempfile.TemporaryDirectory(prefix=prefix)
        self.token_file = os.path.join(self.dir.name, "tokens.yaml")
        with open(self.token_file, "w") as f:
            f.write(token_file_text)
        self.log = open(os.path.join(self.dir.name, "log"), "w+")
        self.process = subprocess.Popen(
            [binary, "up", "--data-dir", os.path.join(self.dir.name, "data"), "--coordinator-listen", "127.0.0.1:0",
             "--metrics-port", "0", "--metrics-bind", "127.0.0.1", "--auth-token-file", self.token_file] +
            list(args(self.dir.name)),
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.banner, self.values = read_banner(self.process)
        if ready_label not in self.values:
            self.stop()
            raise RuntimeError("kvtier up did not start: " + self.banner + self.log_text())

    def log_text(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        """SIGTERM, then the exit code; the directory is removed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)
        self.process.stdout.close()
        self.log.close()
        self.dir.cleanup()
        return self.process.returncode
