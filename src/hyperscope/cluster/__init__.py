"""Clusters: a spec of instance groups, providers that bring it up as real Slurm, and the Slurm adapter.

Slurm is the engine; this package only writes its configuration, starts and stops its daemons and
reads its state back through :mod:`hyperscope.cluster.slurm`.
"""
