"""The process entry: the exit code and the last lines reach the operator, whatever is alive at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_exit_code_and_output_survive_a_client_held_by_a_daemon_thread(tmp_path) -> None:
    # A librdkafka client a daemon thread still holds at exit is never freed: its threads run on
    # while the C library's exit handlers tear down what they use (SIGSEGV on TLS, seen in CI).
    # The entry exits without those handlers, after flushing what the command printed.
    script = textwrap.dedent(
        """
        import sys, threading
        from confluent_kafka import Producer
        import mirror.cli

        held = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
        threading.Thread(target=lambda p=held: threading.Event().wait(60), daemon=True).start()
        sys.argv = ["mirror", "validate", "-c", sys.argv[1]]
        print("before the command", flush=False)
        mirror.cli.entry()
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2, res
    assert res.stdout == "before the command\n"
    assert (
        res.stderr.startswith("Error: ")
        and res.stderr.count("\n") == 1
        and "missing.yaml" in res.stderr
        and "Traceback" not in res.stderr
    )


def test_python_dash_m_mirror_goes_through_the_entry() -> None:
    res = subprocess.run([sys.executable, "-m", "mirror", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip(), res
