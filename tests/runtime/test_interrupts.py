"""A Ctrl-C during an interpreted call stops the caller's loop. The interpreter runs in a thread
of statickernel's, which the call waits for inside a host callback; a KeyboardInterrupt raised
there reaches the caller as XLA's error (a ValueError, "CpuCallback error"), which a loop that
reports failed calls and goes on (`except Exception`, as `sk.testing` and `statickernel test`
do) would take for one more failed call."""

import signal
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from embedding import embedding, embedding_reference
from statickernel.runtime import interpreter

TABLE = jax.random.normal(jax.random.key(0), (67, 256), jnp.float32)
IDS = jnp.asarray(np.arange(65, dtype=np.int32) * 7 % 70 - 1)  # padding and rows past V too


def _loop(calls: int) -> int:
    """Calls the kernel `calls` times as a checking loop does, and returns how many returned."""
    kernel = embedding.with_backend("interpret")
    done = 0
    for _ in range(calls):
        try:
            kernel(TABLE, IDS)
        except Exception:  # a failed call is reported and the loop goes on
            continue
        done += 1
    return done


def _check_still_runs() -> None:
    got = embedding.with_backend("interpret")(TABLE, IDS)
    np.testing.assert_allclose(np.asarray(got), np.asarray(embedding_reference(TABLE, IDS)))


def test_an_interrupt_raised_while_the_call_waits_stops_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _check_still_runs()  # built before the interrupt

    def interrupted(generated: Any, arrays: Any) -> Any:
        raise KeyboardInterrupt  # what the waiting call's `result()` then raises

    monkeypatch.setattr(interpreter, "_interpret", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _loop(3)
    monkeypatch.undo()
    _check_still_runs()


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals are handled in the main thread",
)
def test_a_sigint_while_the_interpreter_runs_stops_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _check_still_runs()
    real = interpreter._interpret  # pyright: ignore[reportPrivateUsage]
    main = threading.main_thread().ident
    assert main is not None

    def interrupting(generated: Any, arrays: Any) -> Any:
        # Ctrl-C, delivered to the main thread while it waits for this launch.
        signal.pthread_kill(main, signal.SIGINT)
        return real(generated, arrays)

    monkeypatch.setattr(interpreter, "_interpret", interrupting)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _loop(3)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    _check_still_runs()
