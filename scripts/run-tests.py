#!/usr/bin/env python3
"""Runs the workspace's test binaries, already built, several at a time.

`cargo test` runs its binaries one after another, and most of them spend their time waiting on
the control planes, nodes and servers they start: two cores sat idle about 60 % of a test run
when measured. This runs up to JOBS binaries side by side instead, each as `cargo test` would
(from its package's directory, with its harness's own threads), longest first, and prints a
binary's output once it ends (all of it when it failed). Every test still runs, whole; only the
binaries overlap.

The heaviest binaries (`--exclusive`: those that start real nodes, a hub and spokes with
containerd and kubelets, and those that run several fleets at once) run one at a time: each
takes most of the machine. Binaries whose tests
freeze servers and time out against them (`--alone`) run with nothing beside them.

Usage: run-tests.py [--jobs N] [--exclusive NAME,...] [--alone NAME,...] [--first NAME,...]
                    -- CARGO_TEST_ARGS...
  --jobs       binaries at a time (default 2)
  --exclusive  test binaries (integration test targets, by name) that never overlap each other
  --alone      test binaries that never overlap any other
  --first      the longest binaries, in order, started first (the rest follow by name)
  CARGO_TEST_ARGS  what `cargo build` got to build the tests (nothing is built again)

Writes each binary's output to target/test-logs/, prints a table of each binary's time, and
exits 1 when any binary failed or printed no result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

RESULT = re.compile(
    r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored", re.M
)


@dataclass
class Binary:
    package: str
    kind: str
    name: str
    executable: str
    directory: str
    log: Path = field(default=Path())
    process: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    passed: int = 0
    failed: int = 0
    ignored: int = 0
    status: int | None = None

    @property
    def label(self) -> str:
        return f"{self.package} {self.kind} {self.name}"


def package_name(package_id: str) -> str:
    """The name in a package ID: `path+file:///…/dns#meridian-dns@0.1.0`, `…/dns#0.1.0` (the
    directory's name is the package's), or the older `meridian-dns 0.1.0 (path+…)`."""
    if "#" not in package_id:
        return package_id.split()[0]
    source, fragment = package_id.rsplit("#", 1)
    if "@" in fragment:
        return fragment.split("@")[0]
    return source.rstrip("/").rsplit("/", 1)[-1]


def test_binaries(cargo: str, args: list[str]) -> list[Binary]:
    """The test executables `cargo test ARGS` would run, as cargo reports them (built already)."""
    output = subprocess.run(
        [cargo, "test", *args, "--no-run", "--message-format=json-render-diagnostics"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    binaries = []
    for line in output.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        manifest = Path(message["manifest_path"])
        package = package_name(message["package_id"])
        binaries.append(
            Binary(
                package=package,
                kind=message["target"]["kind"][0],
                name=message["target"]["name"],
                executable=message["executable"],
                directory=str(manifest.parent),
            )
        )
    return binaries


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--exclusive", default="")
    parser.add_argument("--alone", default="")
    parser.add_argument("--first", default="")
    parser.add_argument("cargo_args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    if options.jobs < 1:
        parser.error("--jobs must be 1 or more")
    cargo_args = [a for a in options.cargo_args if a != "--"]
    cargo = os.environ.get("CARGO", "cargo")
    exclusive = {name for name in options.exclusive.split(",") if name}
    alone = {name for name in options.alone.split(",") if name}
    first = [name for name in options.first.split(",") if name]

    binaries = test_binaries(cargo, cargo_args)
    rank = {name: index for index, name in enumerate(first)}
    binaries.sort(key=lambda b: (rank.get(b.name, len(rank)), b.package, b.kind, b.name))
    logs = Path("target/test-logs")
    logs.mkdir(parents=True, exist_ok=True)

    def is_exclusive(binary: Binary) -> bool:
        return binary.kind == "test" and binary.name in exclusive

    def is_alone(binary: Binary) -> bool:
        return binary.kind == "test" and binary.name in alone

    waiting = list(binaries)
    running: list[Binary] = []
    done: list[Binary] = []

    def stop_running():
        """Stops every binary still running and what it started (each is a process group of its
        own, so a signal to this script's group would not reach them): SIGTERM, then SIGKILL."""
        for signal_number, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            alive = [b for b in running if b.process and b.process.poll() is None]
            for binary in alive:
                try:
                    os.killpg(binary.process.pid, signal_number)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while alive and time.monotonic() < deadline:
                alive = [b for b in alive if b.process.poll() is None]
                time.sleep(0.1)

    def on_signal(signal_number, _frame):
        stop_running()
        sys.exit(128 + signal_number)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        return run(options.jobs, waiting, running, done, (is_exclusive, is_alone), logs)
    finally:
        stop_running()


def run(jobs, waiting, running, done, kinds, logs) -> int:
    """Runs the `waiting` binaries, at most `jobs` at a time, one `is_exclusive` at a time, and
    each `is_alone` with nothing beside it; returns the exit status for the whole run."""
    is_exclusive, is_alone = kinds
    began = time.monotonic()
    while waiting or running:
        while waiting and len(running) < jobs:
            if any(is_alone(b) for b in running):
                break
            busy = any(is_exclusive(b) for b in running)
            pick = next(
                (
                    b
                    for b in waiting
                    if not (busy and is_exclusive(b)) and not (running and is_alone(b))
                ),
                None,
            )
            if pick is None:
                break
            waiting.remove(pick)
            pick.log = logs / f"{pick.package}-{pick.kind}-{pick.name}.log"
            # As `cargo test` runs it: from the package's directory, in a process group of its
            # own so that an interrupted run stops what it started.
            with pick.log.open("w") as log:
                pick.process = subprocess.Popen(
                    [pick.executable],
                    cwd=pick.directory,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "CARGO_MANIFEST_DIR": pick.directory},
                    start_new_session=True,
                )
            pick.started = time.monotonic()
            running.append(pick)
            print(f"started  {pick.label}", flush=True)
        time.sleep(0.2)
        for binary in list(running):
            status = binary.process.poll()
            if status is None:
                continue
            running.remove(binary)
            binary.status = status
            binary.seconds = time.monotonic() - binary.started
            text = binary.log.read_text(errors="replace")
            results = RESULT.findall(text)
            binary.passed = sum(int(r[0]) for r in results)
            binary.failed = sum(int(r[1]) for r in results)
            binary.ignored = sum(int(r[2]) for r in results)
            if status != 0 or not results:
                sys.stdout.write(text)
                print(
                    f"FAILED   {binary.label}: exit {status}"
                    + ("" if results else ", no test result printed")
                    + f" (log: {binary.log})",
                    flush=True,
                )
            else:
                print(
                    f"ok       {binary.label}: {binary.passed} passed in {binary.seconds:.0f} s",
                    flush=True,
                )
            done.append(binary)

    wall = time.monotonic() - began
    print("\ntest binaries, longest first:")
    for binary in sorted(done, key=lambda b: -b.seconds):
        mark = "" if binary.status == 0 else "  FAILED"
        print(f"  {binary.label:<48} {binary.seconds:7.0f} s  {binary.passed:4d} passed{mark}")
    failed = [b for b in done if b.status != 0 or not RESULT.search(b.log.read_text(errors="replace"))]
    passed = sum(b.passed for b in done)
    print(
        f"{len(done)} binaries, {passed} tests passed, "
        f"{sum(b.failed for b in done)} failed, {sum(b.ignored for b in done)} ignored "
        f"in {wall:.0f} s ({sum(b.seconds for b in done):.0f} s of binaries, {jobs} at a time)"
    )
    if failed:
        print("failed: " + ", ".join(b.label for b in failed))
        for binary in failed:
            for reason in why_failed(binary.log.read_text(errors="replace")):
                print(f"  {binary.label}: {reason}")
        return 1
    return 0


# `thread 'name' panicked at …`, with the thread's ID after its name since Rust 1.88.
PANIC = re.compile(r"^thread '([^']*)'(?: \(\d+\))? panicked at (.*)$")


def why_failed(text: str, lines_each: int = 6, most: int = 5) -> list[str]:
    """Each panic in a failed binary's output, as its test and the first lines of its message
    (with the error a test returned):
    the summary then says why a test failed even when only the log's head and tail are kept
    (a long test's output can push its panic far from either)."""
    reasons = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        found = PANIC.match(line)
        if not found:
            continue
        # A test that returns an error prints it (`Error: …`) just before its panic.
        message = [l.strip()[:300] for l in lines[max(0, index - 3) : index] if l.startswith("Error: ")]
        for following in lines[index + 1 : index + 1 + lines_each]:
            if not following.strip() or following.startswith(("note: run with", "stack backtrace:")):
                break
            message.append(following.strip()[:200])
        reasons.append(f"{found.group(1)} at {found.group(2)} " + " / ".join(message))
        if len(reasons) == most:
            break
    return reasons


if __name__ == "__main__":
    sys.exit(main())
