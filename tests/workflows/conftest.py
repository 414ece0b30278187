"""Fixtures shared by the workflow tests: the operations stack and the approvals desk."""

from tests.workflows.test_approvals import desk  # noqa: F401
from tests.workflows.test_operations import stack  # noqa: F401
