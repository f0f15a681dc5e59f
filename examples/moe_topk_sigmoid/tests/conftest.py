"""The case study's tests under kernelpilot's test set-up (tests/conftest.py, loaded by kpilot_testing): its hook
that skips tests marked gpu where there is no NVIDIA GPU, and its helpers.

Every other name of tests/conftest.py is here too. pytest imports this file and tests/conftest.py each as the module
`conftest` (neither folder is a package), so in a session that runs both folders `conftest` is whichever pytest
imported last, and kernelpilot's own tests do `from conftest import ...`: they find the same names either way. Of
its hooks only the gpu skip is taken (run twice in such a session, it marks a test skipped twice, which is
harmless); another hook could do harm run twice, and these tests need none."""

from kpilot_testing import shared

globals().update({name: value for name, value in vars(shared).items() if not name.startswith(("__", "pytest_"))})
pytest_collection_modifyitems = shared.pytest_collection_modifyitems
