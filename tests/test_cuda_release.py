"""Releasing a dropped cuda program's device resources: never inside the garbage collector,
contexts before the module their graphs and streams launch (ptxc.driver.cuda_device.retire).
CPU-only: the device objects are stand-ins that log what is freed."""

import gc
import weakref

from ptxc.driver.cuda_device import _ContextState, _Shared, release_retired, retire


class Log(list):
    def stand_in(self, what):
        log = self

        class Obj:
            def close(self):
                log.append(f"close {what}")

            def unload_module(self, module):
                log.append(f"unload {module}")
        return Obj()


def program_with_contexts(log, n=2):
    """A _Shared with a loaded 'module' and n context states over it, each with a stream."""
    sh = _Shared()
    sh.ctx, sh.module = log.stand_in("ctx"), "module"
    states = []
    for i in range(n):
        st = _ContextState(sh)
        st.stream = log.stand_in(f"stream{i}")
        states.append(st)
    return sh, states


class Owner:
    """Stands for a program and its contexts: a reference cycle, as CudaProgram <-> CudaContext
    is, so only the cyclic collector drops it."""

    def __init__(self, state):
        self.me = self
        weakref.finalize(self, retire, state).atexit = False


def test_the_garbage_collector_frees_nothing_and_the_next_drain_frees_contexts_first():
    log = Log()
    sh, states = program_with_contexts(log)
    # the program's finalizer first: the order a collector may well choose
    owners = [Owner(sh)] + [Owner(st) for st in states]
    del owners
    gc.collect()
    assert log == []                       # nothing freed inside the collector
    release_retired()
    assert log == ["close stream0", "close stream1", "unload module"]
    release_retired()                      # drained: nothing twice
    assert len(log) == 3


def test_a_program_waits_for_its_live_contexts():
    log = Log()
    sh, (a, b) = program_with_contexts(log)
    retire(sh)
    retire(a)
    release_retired()
    assert log == ["close stream0"]        # b is still set up over the module
    b.release()
    release_retired()
    assert log == ["close stream0", "close stream1", "unload module"]


def test_release_twice_is_once():
    log = Log()
    sh, (a,) = program_with_contexts(log, n=1)
    a.release()
    retire(a)                              # the finalizer of an explicitly released context
    release_retired()
    assert log == ["close stream0"] and sh.live_states == 0
