"""Plan files: a compiled engine in one file (its Artifact and runtime options), and the compile
cache of them. "Plan" means the saved file; the arena layout is the memory plan
(:mod:`ptxc.codegen.memory_plan`). This package sits below the driver and imports none of it.

    engine.save("model.plan")                  # ptxc.plan.save.save_plan
    engine = ptxc.load("model.plan")           # ptxc.driver.load.load_plan (reads plan.load's)
    print(ptxc.plan.inspect.inspect_plan(p))   # ``ptxc inspect``: read, nothing run

Modules: :mod:`.format` (the container: prefix, JSON header, blobs, SHA-256), :mod:`.save` (an
engine's header and blobs), :mod:`.load` (a file's Artifact and options, after the checks;
the driver makes the Engine), :mod:`.checks`
(the content checks), :mod:`.object_code` (the ELF check of a cpu plan's object code),
:mod:`.trust` (reading a file, signing), :mod:`.inspect`, :mod:`.cache` (the compile cache) and
:mod:`.cache_trust` (its key and ownership checks).
"""
