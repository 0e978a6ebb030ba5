"""hyperscope: profile training on your own GPUs and keep it alive on Slurm."""

__version__ = "0.1.0"
