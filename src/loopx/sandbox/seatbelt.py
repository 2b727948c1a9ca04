"""A macOS ``sandbox-exec`` profile from a loopx policy (``loopx.sandbox.profile``).

NOT TESTED: loopx's CI has no macOS machine; the profile follows Apple's SBPL as used by other
tools (deny by default, file reads and writes allowed per subpath, network outbound limited to the
policy's ports). ``profile(policy) -> str``.
"""

from __future__ import annotations


def _q(p: str) -> str:
    return '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile(policy: dict) -> str:
    lines = ["(version 1)", "(deny default)", "(allow process-exec)", "(allow process-fork)", "(allow signal (target self))",
             "(allow sysctl-read)", "(allow mach-lookup)", "(allow ipc-posix-shm)", "(allow file-read-metadata)"]
    reads = policy.get("read", []) + policy.get("write", [])
    if reads:
        lines.append("(allow file-read* " + " ".join(f"(subpath {_q(p)})" for p in reads) + ")")
    files = policy.get("read_files", []) + policy.get("write_files", [])
    if files:
        lines.append("(allow file-read* " + " ".join(f"(literal {_q(p)})" for p in files) + ")")
    if policy.get("write"):
        lines.append("(allow file-write* " + " ".join(f"(subpath {_q(p)})" for p in policy["write"]) + ")")
    if policy.get("write_files"):
        lines.append("(allow file-write* " + " ".join(f"(literal {_q(p)})" for p in policy["write_files"]) + ")")
    mount = policy.get("mount") or {}
    # no mount namespace here: a protected path inside a granted tree and a hidden one (holdout
    # data) are denied by later rules (the last matching rule wins)
    if mount.get("ro"):
        lines.append("(deny file-write* " + " ".join(f"(subpath {_q(p)})" for p in mount["ro"]) + ")")
    if mount.get("hide"):
        lines.append("(deny file-read* file-write* " + " ".join(f"(subpath {_q(p)})" for p in mount["hide"]) + ")")
    ports = policy.get("connect")
    if ports is None:
        lines.append("(allow network*)")
    else:
        lines.append("(allow network-outbound (remote unix-socket))")
        for port in ports:
            lines.append(f'(allow network-outbound (remote tcp "*:{int(port)}"))')
    return "\n".join(lines) + "\n"
