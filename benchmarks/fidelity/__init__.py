"""The fidelity benchmark's data and the code that rebuilds its runs (issue 24)."""
