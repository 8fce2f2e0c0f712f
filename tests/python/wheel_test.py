"""The wheel of the Python binding as a user installs it: into a fresh virtual environment
with pip (no index), then the binding's own tests (client_test.py) run from there against
a real `kvtier up`, importing the installed module, not the build tree's.

Run by ctest with KVTIER_WHEEL_DIR at the built wheel and KVTIER_BIN at the kvtier binary.
"""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class WheelTest(unittest.TestCase):
    def test_installs_into_a_fresh_venv_and_serves_the_client_tests(self):
        wheels = glob.glob(os.path.join(os.environ["KVTIER_WHEEL_DIR"], "kvtier-*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        with tempfile.TemporaryDirectory(prefix="kvtier-wheel-") as scratch:
            venv = os.path.join(scratch, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            python = os.path.join(venv, "bin", "python")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            install = subprocess.run(
                [python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
                 wheels[0]], env=env, capture_output=True, text=True)
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)

            where = subprocess.run([python, "-c", "import kvtier; print(kvtier.__file__)"], env=env,
                                   capture_output=True, text=True, cwd=scratch)
            self.assertEqual(where.returncode, 0, where.stderr)
            self.assertTrue(where.stdout.strip().startswith(venv), where.stdout)

            tests = subprocess.run([python, os.path.join(HERE, "client_test.py")], env=env,
                                   capture_output=True, text=True, cwd=scratch, timeout=100)
            self.assertEqual(tests.returncode, 0, tests.stdout + tests.stderr)
            self.assertIn("OK", tests.stderr)

            uninstall = subprocess.run([python, "-m", "pip", "uninstall", "-y", "kvtier"], env=env,
                                       capture_output=True, text=True)
            self.assertEqual(uninstall.returncode, 0, uninstall.stderr)
            gone = subprocess.run([python, "-c", "import kvtier"], env=env, capture_output=True, text=True,
                                  cwd=scratch)
            self.assertNotEqual(gone.returncode, 0, "uninstalled, the module is gone")


if __name__ == "__main__":
    unittest.main()
