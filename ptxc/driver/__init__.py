"""Runtimes that execute compiled programs. :mod:`ptxc.driver.cpu` JIT-compiles a loop-dialect
program with llvmlite and runs its kernels on a thread pool."""
