"""What a project's tests use from the library: the contract on its own model and data
(contract.py, which `tests/test_contract.py` imports) and callbacks that interrupt a run at
an exact point (interrupts.py)."""
