"""The recovery tests' live local cluster (2 workers, 1 spare, the agent on), for the exporter's
end-to-end test."""

from tests.recovery.conftest import local_cluster

__all__ = ["local_cluster"]
