#!/usr/bin/env python3
"""Where a command's peak RSS goes: runs CMD, polls /proc/PID/status every few milliseconds,
and at the highest VmRSS seen prints its anonymous and file-backed parts and the resident
bytes of each mapped file (from /proc/PID/smaps, each mapping counted once).

Usage: rss_peak.py CMD [ARGS...]   (CMD's output is discarded; exit status is CMD's)
Used by bench/convert_large_binary.sh. Polling can miss a short peak: /usr/bin/time's maximum
RSS is the exact figure, this is its breakdown. (/proc/PID/smaps read while the process maps
memory can list a mapping twice or miss one: mappings are counted once per read, and each
file's largest figure of three reads is kept.)
"""
import collections
import subprocess
import sys
import time


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0])
    return out


def files(pid):
    per, seen, current = collections.Counter(), set(), None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                path = parts[5] if len(parts) >= 6 and parts[5].startswith("/") else None
                current = None if parts[0] in seen else path
                seen.add(parts[0])
            elif parts[0] == "Rss:" and current:
                per[current] += int(parts[1])
    return per


def main():
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    best, best_files, best_at = {"VmRSS": 0}, collections.Counter(), 0.0
    while proc.poll() is None:
        try:
            now = status(proc.pid)
            if now.get("VmRSS", 0) > best["VmRSS"]:
                # A read of smaps racing with the process's mmaps can miss a mapping:
                # each file's largest figure of three reads.
                per = collections.Counter()
                for _ in range(3):
                    for path, kib in files(proc.pid).items():
                        per[path] = max(per[path], kib)
                best, best_files, best_at = now, per, time.monotonic() - start
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.005)
    mib = lambda kib: f"{kib / 1024:.0f} MiB"
    print(f"peak RSS seen {mib(best['VmRSS'])} at {best_at:.2f} s of {time.monotonic() - start:.2f} s: "
          f"anonymous {mib(best.get('RssAnon', 0))}, file-backed {mib(best.get('RssFile', 0))}")
    for path, kib in best_files.most_common(4):
        print(f"  {mib(kib):>8}  {path}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
