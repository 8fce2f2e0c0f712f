"""Packs the built `kvtier` extension module into a wheel (PEP 427) for `pip install`.

Usage: make_wheel.py --module PATH --version X.Y.Z --out DIR [--strip PROGRAM]
Run it with the interpreter the module was built for: the wheel's tags (cp311, linux_x86_64)
are that interpreter's. Prints the wheel's path.

Why written here: a wheel is a zip of the module and three metadata files (METADATA, WHEEL
and RECORD, the files' SHA-256 digests), all fixed by the spec. The `wheel` package, which
writes them, is not importable from every interpreter the module is built with (pyenv's
beside Debian's), and setuptools would want to drive the CMake build itself.

The module links Cap'n Proto 0.9.2 and OpenSSL 3 dynamically: the wheel installs on hosts
with Debian 12's libcapnp-0.9.2 and libssl3 (the kvtier runtime); it is not manylinux.
"""
import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "kvtier"


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def tag():
    interpreter = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (interpreter, interpreter, platform)


def metadata(version):
    major, minor = sys.version_info[:2]
    return "\n".join([
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + version,
        "Summary: Client SDK of kvtier, the distributed multi-tier KV-cache service",
        "Requires-Python: ==%d.%d.*" % (major, minor),
        "Requires-External: libcapnp-0.9.2",
        "Requires-External: libssl3",
        "",
        "`import kvtier`: connect to a kvtier node, map its block pool in place, look up,",
        "allocate, commit and onboard KV blocks. See docs/sdk.md in the kvtier repository.",
        "",
    ])


def wheel_file():
    return "\n".join([
        "Wheel-Version: 1.0",
        "Generator: kvtier make_wheel.py",
        "Root-Is-Purelib: false",
        "Tag: " + tag(),
        "",
    ])


def module_bytes(module, strip):
    if not strip:
        with open(module, "rb") as f:
            return f.read()
    with tempfile.TemporaryDirectory() as scratch:
        stripped = os.path.join(scratch, os.path.basename(module))
        shutil.copyfile(module, stripped)
        subprocess.run([strip, "--strip-debug", stripped], check=True)
        with open(stripped, "rb") as f:
            return f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", required=True, help="the built extension module (kvtier.cpython-*.so)")
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True, help="directory for the wheel")
    parser.add_argument("--strip", default="", help="strip program: drops the module's debug info")
    args = parser.parse_args()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not os.path.basename(args.module).endswith(suffix):
        sys.exit("make_wheel.py: %s was not built for this interpreter (%s, module suffix %s)"
                 % (args.module, sys.executable, suffix))

    dist_info = "%s-%s.dist-info" % (NAME, args.version)
    files = [
        (NAME + suffix, module_bytes(args.module, args.strip)),
        (dist_info + "/METADATA", metadata(args.version).encode()),
        (dist_info + "/WHEEL", wheel_file().encode()),
    ]
    record = "".join("%s,%s,%d\n" % (path, digest(data), len(data)) for path, data in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode()))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "%s-%s-%s.whl" % (NAME, args.version, tag()))
    partial = path + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(suffix) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    os.replace(partial, path)  # a wheel is whole or absent
    print(path)


if __name__ == "__main__":
    main()
