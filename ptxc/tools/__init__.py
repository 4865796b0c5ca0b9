"""The tools around the compiler: bench, profile, compare, bisect (the `ptxc` commands)."""
